// Strict JSON reading shared by the file formats: syntax errors at FILE:LINE:COL, field errors by JSON path.
#include "json_reader.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/json_nesting.h"

namespace flexpipe::interop {

using nlohmann::json;

namespace {

// nlohmann reports the 1-based index of the last byte it read; turn it into line and column.
std::pair<int, int> line_and_column(const std::string& text, size_t byte, ColumnUnit unit) {
  const size_t end = std::min(byte > 0 ? byte - 1 : 0, text.size());
  int line = 1, column = 1;
  for (size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if (unit == ColumnUnit::Byte || (static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return {line, column};
}

// nlohmann's message without its own "[json.exception...] parse error at line L, column C: " prefix.
std::string syntax_reason(const json::parse_error& error) {
  std::string_view message = error.what();
  const size_t prefix = message.find("parse error");
  if (prefix != std::string_view::npos) {
    const size_t colon = message.find(": ", prefix);
    if (colon != std::string_view::npos) message.remove_prefix(colon + 2);
  }
  return std::string(message);
}

// Hands the text to nlohmann's parser a byte at a time, leaving in `*read` where the parser stands: just
// after the closing quote of the key it hands over.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  CountingIterator(const char* at, const char** read) : at_(at), read_(read) {}
  reference operator*() const { return *at_; }
  CountingIterator& operator++() {
    *read_ = ++at_;
    return *this;
  }
  bool operator==(const CountingIterator& other) const { return at_ == other.at_; }

 private:
  const char* at_;
  const char** read_;
};

// Builds the document as nlohmann's parser does, iteratively, but refuses a key given twice in one
// object where the second one stands: nlohmann keeps the last in silence, so an edited copy of a field
// above the original would be read and the edit lost.
class StrictBuilder {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  StrictBuilder(const std::string& text, const char* const* read, const std::string& origin, std::string_view label,
                ColumnUnit unit)
      : text_(text), read_(read), origin_(origin), label_(label), unit_(unit) {}
  json& document() { return root_; }

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(number_integer_t value) { return add(value); }
  bool number_unsigned(number_unsigned_t value) { return add(value); }
  bool number_float(number_float_t value, const string_t&) { return add(value); }
  bool string(string_t& value) { return add(std::move(value)); }
  bool binary(binary_t& value) { return add(std::move(value)); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& name) {
    Frame& frame = frames_.back();
    if (frame.container->contains(name)) duplicate(name);
    frame.key = std::move(name);
    return true;
  }
  // Rethrown as json::parse would throw it, for parse_json_text to place.
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& error) {
    if (const auto* syntax = dynamic_cast<const json::parse_error*>(&error)) throw *syntax;
    if (const auto* range = dynamic_cast<const json::out_of_range*>(&error)) throw *range;
    throw Error(located(origin_, 0, 0, fmt::format("{}: {}", label_, error.what())));
  }

 private:
  struct Frame {
    json* container;
    std::string key;  // an object's key whose value comes next
  };

  json* place(json&& value) {
    if (frames_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    Frame& frame = frames_.back();
    if (frame.container->is_array()) {
      frame.container->push_back(std::move(value));
      return &frame.container->back();
    }
    return &((*frame.container)[frame.key] = std::move(value));
  }
  bool add(json&& value) {
    place(std::move(value));
    return true;
  }
  bool open(json&& container) {
    json* placed = place(std::move(container));
    frames_.push_back({placed, {}});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }

  // The key's path, and where it starts: the parser stands just after its closing quote, and the first
  // quote before that one with no backslash escaping it opens the key.
  [[noreturn]] void duplicate(const std::string& name) const {
    std::string path;
    for (size_t i = 0; i + 1 < frames_.size(); ++i)
      path = frames_[i].container->is_array() ? json_element(path, frames_[i].container->size() - 1)
                                              : json_child(path, frames_[i].key);
    path = json_child(path, name);
    size_t open = static_cast<size_t>(*read_ - text_.data()) - 1;
    while (open > 0) {
      --open;
      size_t backslashes = 0;
      while (backslashes < open && text_[open - 1 - backslashes] == '\\') ++backslashes;
      if (text_[open] == '"' && backslashes % 2 == 0) break;
    }
    const auto [line, column] = line_and_column(text_, open + 1, unit_);
    throw Error(located(origin_, line, column,
                        fmt::format("{}: duplicate key {} (JSON keeps only the last; give each key once)", label_,
                                    printable(path, 200))));
  }

  const std::string& text_;
  const char* const* read_;
  const std::string& origin_;
  std::string_view label_;
  ColumnUnit unit_;
  json root_;
  std::vector<Frame> frames_;
};

}  // namespace

void check_json_nesting(const std::string& text, const std::string& origin, std::string_view label, ColumnUnit unit) {
  const size_t at = json_nesting_beyond(text);
  if (at == std::string::npos) return;
  const auto [line, column] = line_and_column(text, at + 1, unit);
  throw Error(located(origin, line, column,
                      fmt::format("{}: arrays and objects nest deeper than {} levels", label, kMaxJsonNesting)));
}

json parse_json_text(const std::string& text, const std::string& origin, std::string_view label, ColumnUnit unit) {
  check_json_nesting(text, origin, label, unit);
  try {
    const char* read = text.data();
    StrictBuilder builder(text, &read, origin, label, unit);
    json::sax_parse(CountingIterator(text.data(), &read), CountingIterator(text.data() + text.size(), &read), &builder);
    return std::move(builder.document());
  } catch (const json::parse_error& error) {
    const auto [line, column] = line_and_column(text, error.byte, unit);
    // nlohmann quotes what it last read, which is where a byte that is not UTF-8 stops it.
    throw Error(located(origin, line, column, fmt::format("{}: {}", label, printable(syntax_reason(error), 200))));
  } catch (const json::out_of_range& error) {
    // A number beyond a double's range (1e999). nlohmann names the number but not where it is: the
    // first place its text stands as a whole token is.
    const std::string message = error.what();
    const size_t open = message.find('\''), close = message.rfind('\'');
    const std::string number =
        open != std::string::npos && close > open ? message.substr(open + 1, close - open - 1) : "";
    size_t at = number.empty() ? std::string::npos : text.find(number);
    const auto is_number_char = [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-';
    };
    while (at != std::string::npos && at > 0 && is_number_char(text[at - 1])) at = text.find(number, at + 1);
    const auto [line, column] = at == std::string::npos ? std::pair{0, 0} : line_and_column(text, at + 1, unit);
    throw Error(located(origin, line, column,
                        fmt::format("{}: number {} is out of range (a double holds up to about 1.8e308)", label,
                                    printable(number.empty() ? std::string("?") : number))));
  }
}

std::string describe_json(const json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  return value.dump();
}

std::string json_child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

std::string json_element(const std::string& path, size_t index) { return fmt::format("{}[{}]", path, index); }

void JsonPathReader::fail(const std::string& path, const std::string& message) const {
  throw Error(located(origin_, 0, 0, path.empty() ? message : fmt::format("{}: {}", path, message)));
}

void JsonPathReader::require_object(const json& value, const std::string& path) const {
  if (!value.is_object()) fail(path, fmt::format("expected an object, got {}", describe_json(value)));
}

void JsonPathReader::only_known_keys(const json& object, const std::string& path,
                                     std::span<const std::string_view> known) const {
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (std::string_view k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
    fail(json_child(path, key), fmt::format("unknown key (known keys: {})", list));
  }
}

double JsonPathReader::number(const json& value, const std::string& path) const {
  if (!value.is_number()) fail(path, fmt::format("expected a number, got {}", describe_json(value)));
  const double result = value.get<double>();
  if (result < 0) fail(path, fmt::format("must not be negative, got {}", value.dump()));
  // Far beyond any real time, size or rate, and far enough below a double's range that sums and
  // products over stages and micro-batches stay finite: the simulator and the search never see inf.
  if (result > kLargestNumber) fail(path, fmt::format("is too large, got {} (at most 1e30)", value.dump()));
  return result;
}

int JsonPathReader::count(const json& value, const std::string& path) const {
  const double result = number(value, path);
  // Compared as doubles first: converting 1e26 to int is undefined, not a wrong answer.
  if (result > std::numeric_limits<int>::max() || result != std::floor(result))
    fail(path,
         fmt::format("must be a whole number of at most {}, got {}", std::numeric_limits<int>::max(), value.dump()));
  return static_cast<int>(result);
}

std::string JsonPathReader::text(const json& value, const std::string& path) const {
  if (!value.is_string()) fail(path, fmt::format("expected a string, got {}", describe_json(value)));
  return value.get<std::string>();
}

void JsonPathReader::check_format_header(const json& document, std::string_view kind, std::string_view format,
                                         int version) const {
  if (!document.contains("format"))
    fail("format", fmt::format("missing (a {} starts with \"format\": \"{}\")", kind, format));
  if (text(document["format"], "format") != format)
    fail("format", fmt::format("expected \"{}\", got {}", format, document["format"].dump()));
  if (!document.contains("version")) fail("version", fmt::format("missing (expected {})", version));
  const json& found = document["version"];
  if (!found.is_number_integer() || found.get<int64_t>() != version)
    fail("version", fmt::format("unsupported version {} (this build reads version {})", found.dump(), version));
}

nlohmann::ordered_json number_json(double value) {
  if (std::isinf(value)) return nullptr;
  if (value == std::floor(value) && std::abs(value) < 9e15) return static_cast<int64_t>(value);
  return value;
}

}  // namespace flexpipe::interop
