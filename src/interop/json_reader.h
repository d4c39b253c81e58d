// Strict reading shared by the JSON file formats: syntax errors at FILE:LINE:COL, and field errors
// that name the file and the JSON path of the bad value. Private to the core library.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace flexpipe::interop {

// Schedule files have always reported syntax-error columns in UTF-8 characters and the cost formats
// in bytes; both are kept so that no message changes.
enum class ColumnUnit { Byte, Utf8Character };

// Refuses text that nests deeper than kMaxJsonNesting, at the bracket that goes too deep:
// "ORIGIN:LINE:COL: LABEL: arrays and objects nest deeper than 1000 levels".
void check_json_nesting(const std::string& text, const std::string& origin, std::string_view label, ColumnUnit unit);

// Parses `text` after check_json_nesting; a syntax error throws Error "ORIGIN:LINE:COL: LABEL: REASON".
nlohmann::json parse_json_text(const std::string& text, const std::string& origin, std::string_view label,
                               ColumnUnit unit);

// How a value reads in a message: scalars as JSON, containers by their kind.
std::string describe_json(const nlohmann::json& value);

std::string json_child(const std::string& path, std::string_view key);
std::string json_element(const std::string& path, size_t index);

// The largest number a file may hold (number() refuses more): far beyond any real time, size or rate.
inline constexpr double kLargestNumber = 1e30;

// Integral values as integers, so that files stay readable; an infinity (no limit) as null.
nlohmann::ordered_json number_json(double value);

// A new document that starts as every file format does, with its "format" and "version": the
// writers' side of JsonPathReader::check_format_header.
template <typename Json>
Json format_header(std::string_view format, int version) {
  Json out;
  out["format"] = format;
  out["version"] = version;
  return out;
}

// Typed field reads for one document; every failure names the origin and the JSON path.
class JsonPathReader {
 public:
  explicit JsonPathReader(const std::string& origin) : origin_(origin) {}

  // "ORIGIN: PATH: MESSAGE", or "ORIGIN: MESSAGE" for the document itself (empty path).
  [[noreturn]] void fail(const std::string& path, const std::string& message) const;

  void require_object(const nlohmann::json& value, const std::string& path) const;
  void only_known_keys(const nlohmann::json& object, const std::string& path,
                       std::span<const std::string_view> known) const;
  // A number from 0 to kLargestNumber.
  double number(const nlohmann::json& value, const std::string& path) const;
  // A whole number from 0 to INT_MAX (a count: operators, devices, micro-batches).
  int count(const nlohmann::json& value, const std::string& path) const;
  std::string text(const nlohmann::json& value, const std::string& path) const;

  // The "format" and "version" that every file format starts with, checked alike for all of them so
  // that a file given to the wrong reader, or written by a newer build, is reported the same way.
  // `kind` names the format for a missing "format" ("a cost table starts with ...").
  void check_format_header(const nlohmann::json& document, std::string_view kind, std::string_view format,
                           int version) const;

 private:
  const std::string& origin_;
};

}  // namespace flexpipe::interop
