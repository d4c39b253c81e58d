// What flexpipe search reports of a run: sizes in the input's units, the limit it measured against, the
// JSON document (--json) and the program it writes (-o) with its header.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flexpipe/workflow/search_request.h"

namespace flexpipe {

// Sizes as the input gives them: a model's in bytes (printed in GB), a cost table's in its own unit,
// bare when it names none.
std::string memory_text(const SearchProblem& problem, double amount);
// The limit the search measured against, for the report's first line.
std::string limit_text(const SearchProblem& problem);
// The largest of per-device figures (0 for none).
double largest(const std::vector<double>& values);
// --json: best, builtins and the search's statistics.
nlohmann::json search_report_json(const SearchRun& run);
// The best schedule as a program, under a header naming the input, the batch, the limit and its figures.
std::string searched_program_text(const SearchRun& run);

}  // namespace flexpipe
