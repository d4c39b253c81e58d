// One exception type for every user-facing failure. Its message is complete and printable as is:
// it names the file, line and column, or the device, position and action, that went wrong.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace flexpipe {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// "FILE:LINE:COL: MESSAGE" (column omitted when 0, line omitted when 0).
std::string located(const std::string& file, int line, int column, const std::string& message);

// Input quoted inside a message: printable ASCII, tabs and well-formed UTF-8 as they are, every other byte
// as \xNN (so a NUL cannot cut the message and binary cannot reach the terminal), and at most `limit`
// characters, then "...".
std::string printable(std::string_view text, size_t limit = 60);

// One input can hold thousands of errors: this many are printed, and the rest counted.
inline constexpr size_t kMaxPrintedErrors = 50;
// "... and N more error(s) not shown"
std::string more_errors(size_t omitted);

}  // namespace flexpipe
