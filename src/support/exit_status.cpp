// The exit code of an exception, for every entry point (the binary and the runtime's).
#include "flexpipe/support/exit_status.h"

#include <cstdio>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {
// A compiler-style message ("prog.fps:5:26: error: expected ')'") says "error:" itself, after the place it
// points at: one prefix is enough.
bool names_itself_an_error(std::string_view message) {
  return message.substr(0, message.find('\n')).find(": error: ") != std::string_view::npos;
}
}  // namespace

int report_error(ExitCode code, std::string_view message) {
  fmt::print(stderr, "{}{}\n", names_itself_an_error(message) ? "" : "error: ", message);
  return code;
}

int report_exception(const std::exception& exception, std::string_view context) {
  if (dynamic_cast<const Error*>(&exception) != nullptr)
    return report_error(kExitBadInput, fmt::format("{}{}", context, exception.what()));
  fmt::print(stderr, "internal error: {}{}\n", context, exception.what());
  return kExitFailure;
}

}  // namespace flexpipe
