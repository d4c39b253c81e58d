#include "flexpipe/support/error.h"

#include <fmt/format.h>

namespace flexpipe {

std::string located(const std::string& file, int line, int column, const std::string& message) {
  if (line <= 0) return fmt::format("{}: {}", file, message);
  if (column <= 0) return fmt::format("{}:{}: {}", file, line, message);
  return fmt::format("{}:{}:{}: {}", file, line, column, message);
}

}  // namespace flexpipe
