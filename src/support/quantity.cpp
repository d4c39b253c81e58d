// Reading, refusing and printing sizes, bandwidths and times with their units.
#include "flexpipe/support/quantity.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

struct Unit {
  std::string_view name;
  double scale;  // in bytes or seconds
};

// Spelled as SI and IEC write them; "KB" too, because people write it for 1000 bytes as often as "kB".
constexpr std::array<Unit, 12> kSizeUnits = {{{"B", 1},
                                              {"kB", 1e3},
                                              {"KB", 1e3},
                                              {"MB", 1e6},
                                              {"GB", 1e9},
                                              {"TB", 1e12},
                                              {"PB", 1e15},
                                              {"KiB", 1024.0},
                                              {"MiB", 1024.0 * 1024},
                                              {"GiB", 1024.0 * 1024 * 1024},
                                              {"TiB", 1024.0 * 1024 * 1024 * 1024},
                                              {"PiB", 1024.0 * 1024 * 1024 * 1024 * 1024}}};

constexpr std::array<Unit, 6> kTimeUnits = {
    {{"ns", 1e-9}, {"us", 1e-6}, {"ms", 1e-3}, {"s", 1}, {"min", 60}, {"h", 3600}}};

std::optional<double> scale_of(std::string_view unit, QuantityKind kind) {
  if (kind == QuantityKind::Time) {
    for (const Unit& u : kTimeUnits)
      if (u.name == unit) return u.scale;
    return std::nullopt;
  }
  if (kind == QuantityKind::Bandwidth) {
    if (!unit.ends_with("/s")) return std::nullopt;
    unit.remove_suffix(2);
  }
  for (const Unit& u : kSizeUnits)
    if (u.name == unit) return u.scale;
  return std::nullopt;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

}  // namespace

std::optional<Quantity> parse_quantity(std::string_view text, QuantityKind kind) {
  text = trimmed(text);
  if (text.empty()) return std::nullopt;
  const std::string copy(text);  // strtod needs the terminating NUL
  char* end = nullptr;
  const double number = std::strtod(copy.c_str(), &end);
  if (end == copy.c_str()) return std::nullopt;
  std::string_view unit = text.substr(end - copy.c_str());
  if (unit.empty()) return Quantity{number, ""};
  if (unit.front() == ' ') unit.remove_prefix(1);
  const std::optional<double> scale = scale_of(unit, kind);
  if (!scale) return std::nullopt;
  return Quantity{number * *scale, std::string(unit)};
}

std::string_view quantity_noun(QuantityKind kind) {
  switch (kind) {
    case QuantityKind::Size: return "a size";
    case QuantityKind::Bandwidth: return "a bandwidth";
    case QuantityKind::Time: return "a time";
  }
  return "a quantity";
}

std::string quantity_refusal(std::string_view text, std::string_view what, std::string_view examples) {
  return fmt::format("'{}' is not {}; write {}", printable(text), what, examples);
}

std::optional<double> seconds_per_time_unit(std::string_view time_unit) {
  for (const Unit& u : kTimeUnits)
    if (u.name == time_unit) return u.scale;
  return std::nullopt;
}

double in_time_unit(const Quantity& time, std::string_view time_unit, std::string_view option) {
  if (time.unit.empty()) return time.value;
  const std::optional<double> seconds = seconds_per_time_unit(time_unit);
  if (!seconds) {
    const double written = time.value / seconds_per_time_unit(time.unit).value_or(1);
    throw Error(fmt::format("{}: {:g}{} cannot be converted: the costs measure time in '{}'; give a bare number in it",
                            option, written, time.unit, time_unit));
  }
  return time.value / *seconds;
}

std::optional<double> bytes_per_memory_unit(std::string_view memory_unit) {
  if (memory_unit == "bytes") return 1.0;
  return scale_of(memory_unit, QuantityKind::Size);
}

double in_memory_unit(const Quantity& size, std::string_view memory_unit, std::string_view option) {
  if (size.unit.empty()) return size.value;
  const std::optional<double> bytes = bytes_per_memory_unit(memory_unit);
  if (!bytes) {
    const double written = size.value / scale_of(size.unit, QuantityKind::Size).value_or(1);
    throw Error(fmt::format("{}: {:g}{} cannot be converted: the costs count memory in '{}'; give a bare number in it",
                            option, written, size.unit, memory_unit));
  }
  return size.value / *bytes;
}

double in_bandwidth_unit(const Quantity& bandwidth, std::string_view memory_unit, std::string_view time_unit,
                         std::string_view option) {
  if (bandwidth.unit.empty()) return bandwidth.value;
  const std::optional<double> bytes = bytes_per_memory_unit(memory_unit);
  const std::optional<double> seconds = seconds_per_time_unit(time_unit);
  if (!bytes || !seconds) {
    const double written = bandwidth.value / scale_of(bandwidth.unit, QuantityKind::Bandwidth).value_or(1);
    throw Error(
        fmt::format("{}: {:g}{} cannot be converted: the costs count memory in '{}' per '{}'; give a bare "
                    "number in it",
                    option, written, bandwidth.unit, memory_unit, time_unit));
  }
  // Bytes per second into memory units per second, then per time unit.
  return bandwidth.value / *bytes * *seconds;
}

std::string format_bytes(double bytes, ByteUnits units) {
  const double size = std::abs(bytes);
  if (units == ByteUnits::None) return fmt::format("{:.6g}", bytes);
  if (units == ByteUnits::Binary) {
    constexpr double kKi = 1024.0, kMi = kKi * 1024, kGi = kMi * 1024, kTi = kGi * 1024;
    if (size >= kTi) return fmt::format("{:.2f} TiB", bytes / kTi);
    if (size >= kGi) return fmt::format("{:.2f} GiB", bytes / kGi);
    if (size >= kMi) return fmt::format("{:.2f} MiB", bytes / kMi);
    if (size >= kKi) return fmt::format("{:.1f} KiB", bytes / kKi);
    return fmt::format("{:.4g} B", bytes);
  }
  if (size >= 1e12) return fmt::format("{:.2f} TB", bytes / 1e12);
  if (size >= 1e9) return fmt::format("{:.2f} GB", bytes / 1e9);
  if (size >= 1e6) return fmt::format("{:.2f} MB", bytes / 1e6);
  if (size >= 1e3) return fmt::format("{:.1f} kB", bytes / 1e3);
  return fmt::format("{:.4g} B", bytes);
}

ByteUnits byte_units_of(const Quantity& written) { return written.binary() ? ByteUnits::Binary : ByteUnits::Decimal; }

std::string format_time(double value, std::string_view time_unit) {
  if (time_unit.empty() || time_unit == "unit") return fmt::format("{:.4g}", value);
  return fmt::format("{:.4g} {}", value, time_unit);
}

}  // namespace flexpipe
