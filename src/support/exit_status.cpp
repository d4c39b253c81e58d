#include "flexpipe/support/exit_status.h"

#include <cstdio>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

int report_error(ExitCode code, std::string_view message) {
  fmt::print(stderr, "error: {}\n", message);
  return code;
}

int report_exception(const std::exception& exception, std::string_view context) {
  if (dynamic_cast<const Error*>(&exception) != nullptr)
    return report_error(kExitBadInput, fmt::format("{}{}", context, exception.what()));
  fmt::print(stderr, "internal error: {}{}\n", context, exception.what());
  return kExitFailure;
}

}  // namespace flexpipe
