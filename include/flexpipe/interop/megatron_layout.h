// Megatron-LM's --pipeline-model-parallel-layout string (anchors.md §2.2) as a partition of a cost graph:
// E embedding, t transformer layer, m MTP layer, L loss (with the final norm and head); '|' separates
// stages, '*k' repeats the symbol or parenthesised group before it, commas and spaces are cosmetic, and
// stages may be empty: "Et*3|(tt|)*29,m|L".
#pragma once
#include <string>
#include <vector>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/stage_aggregation.h"

namespace flexpipe {

// The layout's stages as symbol strings, repeats expanded: "E|(t|)*2L" -> {"E", "t", "tL"}.
// Errors: "pipeline layout, character N: message", then the layout and a caret under character N.
std::vector<std::string> parse_megatron_layout(const std::string& layout);

// Assigns the graph's layers, by role and in order, to the layout's stages. The layout must name every
// layer once, in the model's order.
Partition partition_from_megatron_layout(const CostGraph& graph, const std::string& layout);

}  // namespace flexpipe
