// Quantiles as NumPy's default (linear) computes them, on hand-checked values.
#include "flexpipe/support/statistics.h"

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

TEST(Statistics, QuantilesInterpolateBetweenRanks) {
  const std::vector<double> values = {7, 1, 3, 5};  // sorted 1 3 5 7
  EXPECT_DOUBLE_EQ(median(values), 4);
  EXPECT_DOUBLE_EQ(quantile(values, 0), 1);
  EXPECT_DOUBLE_EQ(quantile(values, 1), 7);
  EXPECT_DOUBLE_EQ(quantile(values, 0.25), 2.5);  // position 0.75 between 1 and 3
  EXPECT_DOUBLE_EQ(quantile(values, 0.75), 5.5);  // position 2.25 between 5 and 7
  EXPECT_DOUBLE_EQ(median({2, 9, 4}), 4);
  EXPECT_DOUBLE_EQ(median({3}), 3);
}

TEST(Statistics, RefusesNoValuesAndFractionsOutsideOne) {
  EXPECT_THROW(median({}), Error);
  EXPECT_THROW(quantile({1}, 1.5), Error);
  EXPECT_THROW(quantile({1}, -0.1), Error);
}

}  // namespace
}  // namespace flexpipe
