// Quantities as people write them: a size (80GiB, 18.1GB, 80e9), a bandwidth (900GB/s, 64GiB/s, 9e11)
// or a time (5ms, 2s, 30us), with or without a unit. One reader for the command line and the files,
// one message shape for what it refuses, and one way back to text in the units the input used.
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace flexpipe {

enum class QuantityKind { Size, Bandwidth, Time };

// A quantity as read. With a unit, `value` is in bytes, bytes per second or seconds; a bare number
// keeps its value as written, in whatever the reader's default unit is.
struct Quantity {
  double value = 0;
  std::string unit;  // as written ("GiB", "GB/s", "ms"); empty for a bare number
  bool binary() const { return unit.find("iB") != std::string::npos; }
  friend bool operator==(const Quantity&, const Quantity&) = default;
};

// `text` read as a quantity of `kind` (surrounding spaces and one space before the unit allowed);
// nullopt when it is not one. Sizes: B, kB, MB, GB, TB, PB (powers of 1000; KB also) and KiB, MiB,
// GiB, TiB, PiB (powers of 1024). Bandwidths: a size unit and "/s". Times: ns, us, ms, s, min, h.
std::optional<Quantity> parse_quantity(std::string_view text, QuantityKind kind);

// "a size", "a bandwidth", "a time".
std::string_view quantity_noun(QuantityKind kind);

// The message for text that is not the quantity an option or field needs: "'80 GiBs' is not a size;
// write 80GiB, 85.9GB or 85899345920". `what` qualifies the noun when the number is out of range
// ("a positive size"); `examples` are the spellings to suggest.
std::string quantity_refusal(std::string_view text, std::string_view what, std::string_view examples);

// Seconds in one `time_unit` ("s", "ms", "us", "ns"); nullopt for a unit that is not a time ("unit").
std::optional<double> seconds_per_time_unit(std::string_view time_unit);

// A time quantity in `time_unit`: a bare number is already in it; one with a unit is converted.
// Throws Error naming `option` when the unit cannot be converted (a table whose time is in "unit").
double in_time_unit(const Quantity& time, std::string_view time_unit, std::string_view option);

// Bytes in one `memory_unit` of a cost table ("bytes", "B", "GB", "GiB", ...); nullopt for a unit
// that is not a size ("unit").
std::optional<double> bytes_per_memory_unit(std::string_view memory_unit);

// A size quantity in `memory_unit`: a bare number is already in it; one with a unit is converted.
// Throws Error naming `option` when the unit cannot be converted (a table whose memory is in "unit").
double in_memory_unit(const Quantity& size, std::string_view memory_unit, std::string_view option);

// A bandwidth quantity in `memory_unit` per `time_unit`, the unit of a cost table's links: a bare number
// is already in it; one with a unit (bytes per second) is converted. Throws Error naming `option` when
// either unit cannot be converted (a table whose memory or time is in "unit").
double in_bandwidth_unit(const Quantity& bandwidth, std::string_view memory_unit, std::string_view time_unit,
                         std::string_view option);

// Bytes as text in the units the input used: decimal ("85.90 GB", "512 B"), binary ("80.00 GiB"),
// or none at all when the memory is counted in the cost table's own unit ("8").
enum class ByteUnits { Decimal, Binary, None };
std::string format_bytes(double bytes, ByteUnits units = ByteUnits::Decimal);
// The units to print a size in that was written as `written`: binary for GiB and its kind, else decimal.
ByteUnits byte_units_of(const Quantity& written);

// A time as text with its unit: "12.5 ms"; a table without a time unit ("unit") prints the number alone.
std::string format_time(double value, std::string_view time_unit);

}  // namespace flexpipe
