// Times, sizes and bandwidths in JSON files: a number in the file's unit or a string with a unit.
#include "json_quantity.h"

#include <optional>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::interop {

namespace {

// Whether a quantity of `kind` written with a unit has a unit of the file's to be converted into.
bool convertible(QuantityKind kind, const DeclaredUnits& units) {
  const bool sizes = bytes_per_memory_unit(units.memory_unit).has_value();
  const bool times = seconds_per_time_unit(units.time_unit).has_value();
  switch (kind) {
    case QuantityKind::Size: return sizes;
    case QuantityKind::Time: return times;
    case QuantityKind::Bandwidth: return sizes && times;
  }
  return false;
}

std::string declared_unit(QuantityKind kind, const DeclaredUnits& units) {
  switch (kind) {
    case QuantityKind::Size: return fmt::format("'{}'", units.memory_unit);
    case QuantityKind::Time: return fmt::format("'{}'", units.time_unit);
    case QuantityKind::Bandwidth: return fmt::format("'{}' per '{}'", units.memory_unit, units.time_unit);
  }
  return "";
}

// The spellings a refusal suggests: only units this file can convert, so that the advice works.
std::string examples(QuantityKind kind, const DeclaredUnits& units) {
  const std::string bare = fmt::format("a bare number in {}", declared_unit(kind, units));
  if (!convertible(kind, units)) return bare;
  switch (kind) {
    case QuantityKind::Size: return "80GiB, 1.5GB or " + bare;
    case QuantityKind::Time: return "5us, 2ms or " + bare;
    case QuantityKind::Bandwidth: return "900GB/s, 64GiB/s or " + bare;
  }
  return bare;
}

// The written quantity in the file's unit; the conversion helpers' own refusal, which names `path` as
// the option, is re-raised through the reader so that it names the file too.
double converted(const JsonPathReader& reader, const Quantity& quantity, const std::string& path, QuantityKind kind,
                 const DeclaredUnits& units) {
  try {
    switch (kind) {
      case QuantityKind::Size: return in_memory_unit(quantity, units.memory_unit, path);
      case QuantityKind::Time: return in_time_unit(quantity, units.time_unit, path);
      case QuantityKind::Bandwidth: return in_bandwidth_unit(quantity, units.memory_unit, units.time_unit, path);
    }
  } catch (const Error& refusal) {
    reader.fail("", refusal.what());
  }
  return quantity.value;
}

}  // namespace

double quantity_in_declared_units(const JsonPathReader& reader, const nlohmann::json& value, const std::string& path,
                                  QuantityKind kind, const DeclaredUnits& units) {
  // A plain number keeps the meaning it always had; number() also words every other type's error.
  if (!value.is_string()) return reader.number(value, path);
  const std::string text = value.get<std::string>();
  const std::optional<Quantity> quantity = parse_quantity(text, kind);
  if (!quantity) reader.fail(path, quantity_refusal(text, quantity_noun(kind), examples(kind, units)));
  // A quoted bare number is more likely a converter's slip than a choice; strict reading does not guess
  // what it meant, and the advice says how to write it.
  if (quantity->unit.empty())
    reader.fail(path,
                quantity_refusal(text, fmt::format("{} with a unit", quantity_noun(kind)), examples(kind, units)));
  // "!(>= 0)" also refuses "nan", which strtod reads.
  if (!(quantity->value >= 0))
    reader.fail(path,
                quantity_refusal(text, fmt::format("{} of at least 0", quantity_noun(kind)), examples(kind, units)));
  const double result = converted(reader, *quantity, path, kind, units);
  // The same bound as a plain number, after conversion: "1e40GB" or "inf" would overflow the sums.
  if (!(result <= kLargestNumber))
    reader.fail(path, fmt::format("is too large, got '{}' (at most 1e30 in {})", printable(text),
                                  declared_unit(kind, units)));
  return result;
}

}  // namespace flexpipe::interop
