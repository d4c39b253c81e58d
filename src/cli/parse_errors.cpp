// Command-line mistakes as one `error:` line: CLI11's messages prefixed and named, typos given the closest known word.
#include "parse_errors.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace flexpipe::cli {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

std::vector<std::string> option_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* option : command.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

// "The following argument was not expected: --x" / "... were not expected: a b": the words.
std::vector<std::string> unexpected_words(const std::string& message) {
  std::vector<std::string> words;
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return words;
  std::string rest = message.substr(colon + 2);
  for (size_t start = 0; start < rest.size();) {
    const size_t end = std::min(rest.find(' ', start), rest.size());
    if (end > start) words.push_back(rest.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

}  // namespace

std::string closest_word(const std::string& word, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::max<size_t>(1, word.size() / 3) + 1;
  for (const std::string& candidate : known) {
    const size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) best = candidate, best_distance = distance;
  }
  return best;
}

std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& error,
                                 const std::vector<std::string>& arguments) {
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  if (parsed.empty()) {
    const auto word = std::find_if(arguments.begin(), arguments.end(),
                                   [](const std::string& a) { return !a.empty() && a[0] != '-'; });
    if (word == arguments.end()) return "name a subcommand (flexpipe --help lists them)";
    const std::string suggestion = closest_word(*word, subcommand_names(app));
    return fmt::format("unknown subcommand '{}'{} (flexpipe --help lists them)", *word,
                       suggestion.empty() ? "" : fmt::format("; did you mean '{}'?", suggestion));
  }
  // The deepest command parsed (`model list`): its options are the ones to suggest, its help the one to read.
  const CLI::App* deepest = parsed.front();
  std::string path = deepest->get_name();
  while (!deepest->get_subcommands().empty()) {
    deepest = deepest->get_subcommands().front();
    path += " " + deepest->get_name();
  }
  const CLI::App& command = *deepest;
  const std::string help = fmt::format("flexpipe {} --help", path);
  // A command of commands (`model`) whose own subcommand is missing or mistyped: said like the top level's.
  if (!subcommand_names(command).empty()) {
    const auto name = std::find(arguments.begin(), arguments.end(), command.get_name());
    const auto word = std::find_if(name == arguments.end() ? name : name + 1, arguments.end(),
                                   [](const std::string& a) { return !a.empty() && a[0] != '-'; });
    const std::vector<std::string> known = subcommand_names(command);
    if (word == arguments.end())
      return fmt::format("{}: name a subcommand: {} (see {})", path, fmt::join(known, ", "), help);
    const std::string suggestion = closest_word(*word, known);
    return fmt::format("{}: unknown subcommand '{}'{} (see {})", path, *word,
                       suggestion.empty() ? "" : fmt::format("; did you mean '{}'?", suggestion), help);
  }
  // CLI11 names an ExtrasError after the subcommand, so it is told by its message.
  if (std::string_view(error.what()).starts_with("The following argument")) {
    // CLI11 lists them last first; the command line's order reads better.
    std::vector<std::string> words = unexpected_words(error.what());
    const auto position = [&](const std::string& word) {
      return std::find(arguments.begin(), arguments.end(), word) - arguments.begin();
    };
    std::stable_sort(words.begin(), words.end(),
                     [&](const std::string& a, const std::string& b) { return position(a) < position(b); });
    std::vector<std::string> parts;
    for (const std::string& word : words) {
      const std::string suggestion = word.starts_with("-") ? closest_word(word, option_names(command)) : "";
      parts.push_back(
          fmt::format("'{}'{}", word, suggestion.empty() ? "" : fmt::format(" (did you mean {}?)", suggestion)));
    }
    return fmt::format("{}: unexpected {} {}; see {}", path, parts.size() == 1 ? "argument" : "arguments",
                       fmt::join(parts, ", "), help);
  }
  return fmt::format("{} (see {})", error.what(), help);
}

}  // namespace flexpipe::cli
