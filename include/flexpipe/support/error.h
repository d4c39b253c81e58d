#pragma once
// One exception type for every user-facing failure. Its message is complete and printable as is:
// it names the file, line and column, or the device, position and action, that went wrong.
#include <stdexcept>
#include <string>

namespace flexpipe {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// "FILE:LINE:COL: MESSAGE" (column omitted when 0, line omitted when 0).
std::string located(const std::string& file, int line, int column, const std::string& message);

}  // namespace flexpipe
