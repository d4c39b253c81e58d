// The checks every numeric option uses, with one message shape ("--devices: must be a whole number of
// at least 1, got 0"; "--memory-limit: '80 GiBs' is not a size; write 80GiB, 85.9GB or 85899345920"),
// so that no value is silently replaced by a default and no message shows CLI11's internal ranges.
#pragma once
#include <string>

#include <CLI/CLI.hpp>

#include "flexpipe/support/quantity.h"

namespace flexpipe::cli {

CLI::Validator whole_number_at_least(long long minimum);  // counts: devices, micro-batches, chunks
CLI::Validator whole_number_between(long long minimum, long long maximum);
CLI::Validator positive_number();      // finite and above 0: sizes of micro-batches, sequences
CLI::Validator non_negative_number();  // finite and at least 0: learning rates, tolerances
CLI::Validator fraction();             // from 0 to 1

// Which quantities an option accepts: above 0 or at least 0, and whether inf (no limit) is one.
enum class QuantityRange { Positive, NonNegative, PositiveOrInfinite, NonNegativeOrInfinite };

// What a quantity option tells a user to write, by what its bare numbers mean.
inline constexpr const char* kBytesExamples = "80GiB, 85.9GB or 85899345920";
inline constexpr const char* kBytesPerSecondExamples = "900GB/s, 64GiB/s or 9e11 (bytes per second)";
inline constexpr const char* kSecondsExamples = "10s, 500ms or 10 (seconds)";
inline constexpr const char* kGraphTimeExamples = "5us, 0.01ms or 0.01 (in the model's time unit)";
inline constexpr const char* kTableMemoryExamples = "80GiB, 85.9GB or 8 (in the cost table's memory unit)";

// An option that reads a quantity of `kind` in `range` into `target` (the unit kept, for what is
// printed back and for bare numbers whose unit depends on the costs).
CLI::Option* add_quantity_option(CLI::App* command, const std::string& name, Quantity& target, QuantityKind kind,
                                 QuantityRange range, const char* examples, const std::string& description);
// The same into a number in the base unit (bytes, bytes per second, seconds), for options whose bare
// numbers are in that unit already.
CLI::Option* add_quantity_option(CLI::App* command, const std::string& name, double& target, QuantityKind kind,
                                 QuantityRange range, const char* examples, const std::string& description);

}  // namespace flexpipe::cli
