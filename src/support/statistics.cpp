// Medians, quantiles and means of measured times.
#include "flexpipe/support/statistics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) throw Error("quantile of no values");
  if (!(q >= 0 && q <= 1)) throw Error(fmt::format("quantile {} is outside 0 to 1", q));
  const double position = q * static_cast<double>(values.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  std::nth_element(values.begin(), values.begin() + below, values.end());
  const double low = values[below];
  if (below + 1 >= values.size()) return low;
  const double high = *std::min_element(values.begin() + below + 1, values.end());
  return low + (position - static_cast<double>(below)) * (high - low);
}

double mean(const std::vector<double>& values) {
  if (values.empty()) throw Error("mean of no values");
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

}  // namespace flexpipe
