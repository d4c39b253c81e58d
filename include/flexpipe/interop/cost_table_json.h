#pragma once
// The stage cost table's file format (docs/cost-table.md: "format": "flexpipe-costs", "version": 1).
#include <string>

#include "flexpipe/costs/cost_table.h"

namespace flexpipe {

// Errors name the file and, for syntax errors, line and column.
CostTable load_cost_table(const std::string& path);
CostTable parse_cost_table(const std::string& text, const std::string& origin);
std::string cost_table_to_json(const CostTable& costs);

}  // namespace flexpipe
