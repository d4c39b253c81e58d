// Numeric option checks: the value is parsed as the option will read it, and judged as a whole.
#include "number_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace flexpipe::cli {

namespace {

bool read_option_number(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

}  // namespace

CLI::Validator whole_number_at_least(long long minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        const std::string what = fmt::format("must be a whole number of at least {}", minimum);
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
          return fmt::format("{}, got '{}'", what, text);
        if (value < minimum) return fmt::format("{}, got {}", what, value);
        return "";
      },
      fmt::format("INT>={}", minimum));
}

CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!read_option_number(text, value) || !std::isfinite(value) || value <= 0)
          return fmt::format("must be a positive number, got '{}'", text);
        return "";
      },
      "NUMBER>0");
}

CLI::Validator non_negative_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!read_option_number(text, value) || !std::isfinite(value) || value < 0)
          return fmt::format("must be a number of at least 0, got '{}'", text);
        return "";
      },
      "NUMBER>=0");
}

CLI::Validator positive_rate() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!read_option_number(text, value) || std::isnan(value) || value <= 0)
          return fmt::format("must be a positive number, or inf for no limit, got '{}'", text);
        return "";
      },
      "NUMBER>0|inf");
}

CLI::Validator non_negative_rate() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!read_option_number(text, value) || std::isnan(value) || value < 0)
          return fmt::format("must be a number of at least 0, or inf for no limit, got '{}'", text);
        return "";
      },
      "NUMBER>=0|inf");
}

}  // namespace flexpipe::cli
