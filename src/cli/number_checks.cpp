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

// A check of a real number: `accepts` judges the parsed value; `what` is the message's "must be ...".
CLI::Validator number_check(bool (*accepts)(double), const char* what, const char* description) {
  return CLI::Validator(
      [accepts, what](std::string& text) -> std::string {
        double value = 0;
        if (read_option_number(text, value) && accepts(value)) return "";
        return fmt::format("must be {}, got '{}'", what, text);
      },
      description);
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
  return number_check([](double x) { return std::isfinite(x) && x > 0; }, "a positive number", "NUMBER>0");
}

CLI::Validator non_negative_number() {
  return number_check([](double x) { return std::isfinite(x) && x >= 0; }, "a number of at least 0", "NUMBER>=0");
}

CLI::Validator positive_rate() {
  return number_check([](double x) { return !std::isnan(x) && x > 0; }, "a positive number, or inf for no limit",
                      "NUMBER>0|inf");
}

CLI::Validator non_negative_rate() {
  return number_check([](double x) { return !std::isnan(x) && x >= 0; }, "a number of at least 0, or inf for no limit",
                      "NUMBER>=0|inf");
}

}  // namespace flexpipe::cli
