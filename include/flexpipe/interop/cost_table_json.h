// The stage cost table's file format (docs/cost-table.md: "format": "flexpipe-costs", "version": 1).
#pragma once
#include <string>
#include <vector>

#include "flexpipe/costs/cost_table.h"

namespace flexpipe {

// What a table states rather than leaves to its defaults, for callers that act only on given costs:
// `flexpipe search --costs` recomputes only the stages whose R time is given and offloads only over
// a given host link (docs/search.md, "From a cost table").
struct StatedCosts {
  std::vector<char> recompute;  // per stage: "recompute" given, in its entry or in "all_stages"
  bool host_link = false;       // "host_link" given as a link object (not null)
};

// Times, sizes and bandwidths are plain numbers in the table's time_unit / memory_unit, or strings with
// a unit ("5us", "1.5GiB", "900GB/s") converted into them; the writer writes plain numbers.
// Errors name the file and, for syntax errors, line and column. With `expected_stages`, the stages
// per pipeline of the schedule the table is for, a table shared by "num_stages" stages is checked
// against it before it is expanded. `stated`, when given, is filled in.
CostTable load_cost_table(const std::string& path, int expected_stages = 0, StatedCosts* stated = nullptr);
CostTable parse_cost_table(const std::string& text, const std::string& origin, int expected_stages = 0,
                           StatedCosts* stated = nullptr);
std::string cost_table_to_json(const CostTable& costs);

}  // namespace flexpipe
