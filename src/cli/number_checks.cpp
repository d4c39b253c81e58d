// Numeric option checks: the value is parsed as the option will read it, and judged as a whole.
#include "number_checks.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

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
        return fmt::format("must be {}, got '{}'", what, printable(text));
      },
      description);
}

CLI::Validator whole_number_check(long long minimum, std::optional<long long> maximum) {
  const std::string what = maximum ? fmt::format("must be a whole number from {} to {}", minimum, *maximum)
                                   : fmt::format("must be a whole number of at least {}", minimum);
  return CLI::Validator(
      [minimum, maximum, what](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
          return fmt::format("{}, got '{}'", what, printable(text));
        if (value < minimum || (maximum && value > *maximum)) return fmt::format("{}, got {}", what, value);
        return "";
      },
      maximum ? fmt::format("INT {}..{}", minimum, *maximum) : fmt::format("INT>={}", minimum));
}

bool in_range(double value, QuantityRange range) {
  switch (range) {
    case QuantityRange::Positive: return std::isfinite(value) && value > 0;
    case QuantityRange::NonNegative: return std::isfinite(value) && value >= 0;
    case QuantityRange::PositiveOrInfinite: return !std::isnan(value) && value > 0;
    case QuantityRange::NonNegativeOrInfinite: return !std::isnan(value) && value >= 0;
  }
  return false;
}

// "a positive size", "a bandwidth of at least 0, or inf for no limit".
std::string ranged_noun(QuantityKind kind, QuantityRange range) {
  const std::string noun(quantity_noun(kind));
  switch (range) {
    case QuantityRange::Positive: return "a positive " + noun.substr(2);
    case QuantityRange::NonNegative: return noun + " of at least 0";
    case QuantityRange::PositiveOrInfinite: return "a positive " + noun.substr(2) + ", or inf for no limit";
    case QuantityRange::NonNegativeOrInfinite: return noun + " of at least 0, or inf for no limit";
  }
  return noun;
}

CLI::Option* add_checked_quantity(CLI::App* command, const std::string& name, QuantityKind kind, QuantityRange range,
                                  const char* examples, const std::string& description,
                                  std::function<void(const Quantity&)> store) {
  const char* type = kind == QuantityKind::Size ? "SIZE" : kind == QuantityKind::Bandwidth ? "BANDWIDTH" : "TIME";
  CLI::Validator check(
      [kind, range, examples](std::string& text) -> std::string {
        const std::optional<Quantity> q = parse_quantity(text, kind);
        if (!q) return quantity_refusal(text, quantity_noun(kind), examples);
        if (!in_range(q->value, range)) return quantity_refusal(text, ranged_noun(kind, range), examples);
        return "";
      },
      "");
  return command
      ->add_option_function<std::string>(
          name, [kind, store](const std::string& text) { store(*parse_quantity(text, kind)); }, description)
      ->check(check)
      ->type_name(type);
}

}  // namespace

CLI::Validator whole_number_at_least(long long minimum) { return whole_number_check(minimum, std::nullopt); }

CLI::Validator whole_number_between(long long minimum, long long maximum) {
  return whole_number_check(minimum, maximum);
}

CLI::Validator positive_number() {
  return number_check([](double x) { return std::isfinite(x) && x > 0; }, "a positive number", "NUMBER>0");
}

CLI::Validator non_negative_number() {
  return number_check([](double x) { return std::isfinite(x) && x >= 0; }, "a number of at least 0", "NUMBER>=0");
}

CLI::Validator fraction() {
  return number_check([](double x) { return x >= 0 && x <= 1; }, "a number from 0 to 1", "NUMBER 0..1");
}

CLI::Option* add_quantity_option(CLI::App* command, const std::string& name, Quantity& target, QuantityKind kind,
                                 QuantityRange range, const char* examples, const std::string& description) {
  return add_checked_quantity(command, name, kind, range, examples, description,
                              [&target](const Quantity& q) { target = q; });
}

CLI::Option* add_quantity_option(CLI::App* command, const std::string& name, double& target, QuantityKind kind,
                                 QuantityRange range, const char* examples, const std::string& description) {
  return add_checked_quantity(command, name, kind, range, examples, description,
                              [&target](const Quantity& q) { target = q.value; });
}

}  // namespace flexpipe::cli
