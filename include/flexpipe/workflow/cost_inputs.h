// Where a command's stage costs come from: a cost table file, uniform costs, or a model aggregated under
// a partition; with the memory limit and the two-level topology the command line sets on top.
#pragma once
#include <string>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/support/quantity.h"
#include "flexpipe/workflow/model_inputs.h"

namespace flexpipe {

struct CostOptions {
  std::string costs_file;
  std::string uniform = "1,1,1,0";
  Quantity memory_limit;        // 0: from the cost table; a bare number is in the table's memory unit
  NamedModel model;             // --model: the table comes from aggregating the model's cost graph
  std::string partition;        // Megatron layout, layers:N,N,... or ops:N,N,...; empty: even
  int devices_per_node = 0;     // 0: the table's own topology
  std::string inter_node_link;  // "LATENCY[,BANDWIDTH]" in the table's units; with devices_per_node
};

// The table for `schedule`'s stages and devices, checked against them; throws Error naming its origin.
CostTable load_costs(const CostOptions& options, const Schedule& schedule);
// --devices-per-node and --inter-node-link, when given, replace the table's topology.
void apply_topology(const CostOptions& options, CostTable& costs);

}  // namespace flexpipe
