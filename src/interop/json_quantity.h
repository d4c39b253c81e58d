// Times, sizes and bandwidths in the JSON files people write by hand: a plain number in the file's
// declared unit, as always, or a string with a unit ("5us", "80GiB", "900GB/s") read by the same parser
// as the command line's options and converted into that unit, so that a table can be copied from a
// datasheet as written. Private to the core library.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "flexpipe/support/quantity.h"
#include "json_reader.h"

namespace flexpipe::interop {

// The units a file declares: every time in `time_unit`, every size in `memory_unit`, every bandwidth
// in `memory_unit` per `time_unit`. "unit" (the default) is a count that no written unit converts into.
struct DeclaredUnits {
  std::string time_unit = "unit";
  std::string memory_unit = "unit";
};

// `value` at `path` as a quantity of `kind` in `units`: a number from 0 to kLargestNumber, kept as it
// is, or a string that parse_quantity reads with a unit, converted. Every failure is one `reader.fail`
// naming the path: text that is no quantity or has no unit, a negative quantity, a unit the file's
// unit cannot take, or one too large.
double quantity_in_declared_units(const JsonPathReader& reader, const nlohmann::json& value, const std::string& path,
                                  QuantityKind kind, const DeclaredUnits& units);

}  // namespace flexpipe::interop
