// The exit code of an exception, for every entry point (the binary and the runtime's).
#include "flexpipe/support/exit_status.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {
// A compiler-style message ("prog.fps:5:26: error: expected ')'") says "error:" itself, after the place it
// points at: one prefix is enough.
bool names_itself_an_error(std::string_view message) {
  return message.substr(0, message.find('\n')).find(": error: ") != std::string_view::npos;
}

// Every line as printable() quotes it: a message that quotes input it did not escape (an option's value,
// a library's own words) still cannot put bytes that are not UTF-8, or control bytes, on the terminal.
std::string printable_lines(std::string_view message) {
  std::string out;
  for (size_t start = 0; start <= message.size();) {
    const size_t end = std::min(message.find('\n', start), message.size());
    out += printable(message.substr(start, end - start), end - start);
    if (end == message.size()) break;
    out += '\n';
    start = end + 1;
  }
  return out;
}
}  // namespace

int report_error(ExitCode code, std::string_view message) {
  fmt::print(stderr, "{}{}\n", names_itself_an_error(message) ? "" : "error: ", printable_lines(message));
  return code;
}

int report_exception(const std::exception& exception, std::string_view context) {
  if (dynamic_cast<const Error*>(&exception) != nullptr)
    return report_error(kExitBadInput, fmt::format("{}{}", context, exception.what()));
  fmt::print(stderr, "internal error: {}\n", printable_lines(fmt::format("{}{}", context, exception.what())));
  return kExitFailure;
}

}  // namespace flexpipe
