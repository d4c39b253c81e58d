#pragma once
// The stage cost table's file format (docs/cost-table.md: "format": "flexpipe-costs", "version": 1).
#include <string>

#include "flexpipe/costs/cost_table.h"

namespace flexpipe {

// Errors name the file and, for syntax errors, line and column. With `expected_stages`, the stages
// per pipeline of the schedule the table is for, a table shared by "num_stages" stages is checked
// against it before it is expanded.
CostTable load_cost_table(const std::string& path, int expected_stages = 0);
CostTable parse_cost_table(const std::string& text, const std::string& origin, int expected_stages = 0);
std::string cost_table_to_json(const CostTable& costs);

}  // namespace flexpipe
