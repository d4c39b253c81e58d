#pragma once
// The checks every numeric option uses, with one message shape ("--devices: must be a whole number of
// at least 1, got 0"), so that no value is silently replaced by a default and no message shows
// CLI11's internal ranges.
#include <CLI/CLI.hpp>

namespace flexpipe::cli {

CLI::Validator whole_number_at_least(long long minimum);  // counts: devices, micro-batches, chunks
CLI::Validator positive_number();                         // finite and above 0: memory limits, sizes
CLI::Validator non_negative_number();                     // finite and at least 0: latencies, grace periods
CLI::Validator positive_rate();                           // above 0, or inf for no limit: bandwidths
CLI::Validator non_negative_rate();                       // at least 0, or inf: a host link where 0 means no offloading

}  // namespace flexpipe::cli
