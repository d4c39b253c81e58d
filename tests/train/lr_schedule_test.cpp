// Warm-up and cosine decay, at hand-computed points.
#include <gtest/gtest.h>

#include "flexpipe/support/error.h"
#include "flexpipe/train/lr_schedule.h"

namespace flexpipe {
namespace {

TEST(LrSchedule, WarmupIsLinearAndEndsAtThePeak) {
  const LrSchedule s{1.0, 4, 10, 0.1};
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(s, 1), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(s, 3), 1.0);
}

TEST(LrSchedule, CosineDecaysToTheFloorAndStays) {
  const LrSchedule s{1.0, 4, 10, 0.1};
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 1.0);                // progress 0
  EXPECT_NEAR(learning_rate(s, 9), 0.1 + 0.9 * 0.5, 1e-15);  // halfway: cos(pi/2) = 0
  EXPECT_DOUBLE_EQ(learning_rate(s, 14), 0.1);               // progress 1
  EXPECT_DOUBLE_EQ(learning_rate(s, 100), 0.1);
}

TEST(LrSchedule, NoDecayKeepsThePeak) {
  EXPECT_DOUBLE_EQ(learning_rate({2e-3, 0, 0, 0.1}, 0), 2e-3);
  EXPECT_DOUBLE_EQ(learning_rate({2e-3, 0, 0, 0.1}, 57), 2e-3);
}

TEST(LrSchedule, BadValuesAreRefused) {
  EXPECT_THROW(check_lr_schedule({-1, 0, 0, 0.1}), Error);
  EXPECT_THROW(check_lr_schedule({1, -1, 0, 0.1}), Error);
  EXPECT_THROW(check_lr_schedule({1, 0, 0, 1.5}), Error);
  EXPECT_NO_THROW(check_lr_schedule({1, 10, 100, 0.0}));
}

}  // namespace
}  // namespace flexpipe
