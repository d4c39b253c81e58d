// Slurm's compressed host lists. Commas separate hosts except inside brackets, where they separate
// ranges: "a[1-2,5],b" is a1 a2 a5 b. Slurm writes at most one bracket group per host name in
// practice, but several ("rack[1-2]-node[1-2]") expand as a product, as scontrol does.
#include "flexpipe/train/slurm_nodelist.h"

#include <charconv>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

namespace {

// More entries than any Slurm job has: each range is bounded, but ranges in series and bracket groups
// in product could otherwise turn a few hundred bytes into billions of names.
constexpr size_t kMostEntries = 100000;

[[noreturn]] void malformed(const std::string& variable, const std::string& text, const std::string& why) {
  throw Error(
      fmt::format("environment variable {}='{}' is not in Slurm's compressed list form: {}", variable, text, why));
}

int whole_number(const std::string& digits, const std::string& variable, const std::string& text) {
  int value = 0;
  const auto [end, status] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || status != std::errc() || end != digits.data() + digits.size() || value < 0)
    malformed(variable, text, fmt::format("'{}' is not a number", digits));
  return value;
}

// "a,b,,c" -> a, b, "", c: every item, empty ones included (the callers refuse those).
std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    items.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  return items;
}

// The values one bracket's contents stand for: "01-03,07" -> 01 02 03 07.
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& variable,
                                       const std::string& text) {
  std::vector<std::string> values;
  for (const std::string& range : comma_items(ranges)) {
    const size_t dash = range.find('-');
    const std::string low_text = range.substr(0, dash);
    const std::string high_text = dash == std::string::npos ? low_text : range.substr(dash + 1);
    const int low = whole_number(low_text, variable, text), high = whole_number(high_text, variable, text);
    if (high < low) malformed(variable, text, fmt::format("the range {} runs backwards", range));
    if (high - low > 100000) malformed(variable, text, fmt::format("the range {} is implausibly long", range));
    if (values.size() + static_cast<size_t>(high - low) >= kMostEntries)
      malformed(variable, text, fmt::format("it stands for more than {} hosts", kMostEntries));
    for (int value = low; value <= high; ++value)
      values.push_back(fmt::format("{:0{}}", value, static_cast<int>(low_text.size())));
  }
  return values;
}

// One host expression (no top-level comma): every bracket group expands, left to right.
std::vector<std::string> expand_host(const std::string& host, const std::string& variable, const std::string& text) {
  std::vector<std::string> names = {""};
  size_t at = 0;
  while (at < host.size()) {
    const size_t open = host.find('[', at);
    const std::string literal = host.substr(at, open == std::string::npos ? std::string::npos : open - at);
    if (literal.find(']') != std::string::npos) malformed(variable, text, "a ']' without its '['");
    for (std::string& name : names) name += literal;
    if (open == std::string::npos) break;
    const size_t close = host.find(']', open);
    if (close == std::string::npos) malformed(variable, text, "a '[' without its ']'");
    const std::vector<std::string> values = expand_ranges(host.substr(open + 1, close - open - 1), variable, text);
    if (names.size() * values.size() > kMostEntries)
      malformed(variable, text, fmt::format("it stands for more than {} hosts", kMostEntries));
    std::vector<std::string> product;
    for (const std::string& name : names)
      for (const std::string& value : values) product.push_back(name + value);
    names = std::move(product);
    at = close + 1;
  }
  return names;
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& text, const std::string& variable) {
  std::vector<std::string> hosts;
  std::string current;
  int depth = 0;
  auto finish = [&] {
    if (current.empty()) malformed(variable, text, "an empty host name");
    for (std::string& host : expand_host(current, variable, text)) hosts.push_back(std::move(host));
    if (hosts.size() > kMostEntries)
      malformed(variable, text, fmt::format("it stands for more than {} hosts", kMostEntries));
    current.clear();
  };
  for (const char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) malformed(variable, text, "unbalanced brackets");
    if (c == ',' && depth == 0)
      finish();
    else
      current += c;
  }
  if (depth != 0) malformed(variable, text, "a '[' without its ']'");
  finish();
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& text, const std::string& variable) {
  std::vector<int> counts;
  for (const std::string& item : comma_items(text)) {
    const size_t repeat = item.find("(x");
    int times = 1;
    if (repeat != std::string::npos) {
      if (!item.ends_with(")")) malformed(variable, text, fmt::format("'{}' should read COUNT(xNODES)", item));
      times = whole_number(item.substr(repeat + 2, item.size() - repeat - 3), variable, text);
    }
    const int count = whole_number(item.substr(0, repeat), variable, text);
    if (counts.size() + static_cast<size_t>(times) > kMostEntries)
      malformed(variable, text, fmt::format("it stands for more than {} nodes", kMostEntries));
    counts.insert(counts.end(), static_cast<size_t>(times), count);
  }
  return counts;
}

}  // namespace flexpipe::runtime
