// A partition in the forms the commands meet it: a graph's stage of each operator (Partition), the
// --partition text (a Megatron layout, layers:N,..., ops:N,...), and a partition plan. The one place
// that turns each into the other (a plan into a Partition is partition/plan.h's plan_partition).
#pragma once
#include <string>
#include <vector>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/partition/plan.h"

namespace flexpipe {

// A --partition spec (Megatron layout, layers:N,..., ops:N,...; empty: even by layers) for `stages`
// chunks of `graph`; throws Error naming the bad field, or when it makes another number of chunks.
Partition parse_partition(const CostGraph& graph, const std::string& spec, int stages);
// The --partition spec that gives back a contiguous partition: "ops:N,N,...".
std::string operators_spec(const Partition& partition);

// What a plan records beside its stages when a partition becomes one.
struct PlanContext {
  std::string model;     // the --model the plan is for
  std::string schedule;  // built-in name or program file
  int devices = 0;
  int microbatches = 0;
  std::string method;  // who made the partition ("search")
};
// A contiguous partition of `graph` as a plan (docs/partition-plan.md) with every operator kept: no
// recompute, no offload, no memory limit; each stage reports its first and last operator.
PartitionPlan plan_of_partition(const CostGraph& graph, const Partition& partition, const PlanContext& context);

}  // namespace flexpipe
