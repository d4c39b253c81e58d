// The cost graph's file format (docs/cost-graph.md).
#pragma once
#include <string>

#include "flexpipe/costs/cost_graph.h"

namespace flexpipe {

// Syntax errors name FILE:LINE:COL; other errors the JSON path (nodes[3].forward.time).
CostGraph parse_cost_graph(const std::string& text, const std::string& origin);
CostGraph load_cost_graph(const std::string& path);
std::string cost_graph_to_json(const CostGraph& graph);

}  // namespace flexpipe
