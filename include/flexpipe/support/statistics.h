// Order statistics of measured times: what a report over many steps or repeats quotes, since a
// shared machine's outliers would move a mean.
#pragma once
#include <vector>

namespace flexpipe {

// The value below which a fraction `q` (0 to 1) of `values` lies, interpolated linearly between the
// two nearest ranks (NumPy's default); the median is q = 0.5. Throws Error when `values` is empty
// or q is outside [0, 1].
double quantile(std::vector<double> values, double q);
inline double median(std::vector<double> values) { return quantile(std::move(values), 0.5); }
// The arithmetic mean; throws Error when `values` is empty.
double mean(const std::vector<double>& values);

}  // namespace flexpipe
