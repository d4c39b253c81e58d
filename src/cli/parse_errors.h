// Command-line mistakes as one `error:` line: CLI11's own messages get the prefix and the subcommand's
// name, and a mistyped subcommand or option gets the closest known one ("did you mean").
#pragma once
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace flexpipe::cli {

// The known word closest to `word` by edit distance, when it is close enough to be a typo (at most a
// third of the word's letters, and at least one, differ); empty otherwise.
std::string closest_word(const std::string& word, const std::vector<std::string>& known);

// The one line (without "error: ") that reports `error`, raised while parsing `arguments` (argv
// without the program name) for `app`.
std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& error,
                                 const std::vector<std::string>& arguments);

}  // namespace flexpipe::cli
