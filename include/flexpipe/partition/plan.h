// A partition plan: what `flexpipe partition` decided (operator ranges per stage and, per operator,
// keep / recompute / offload) with the problem it was made for, so that `simulate`, `train` and
// `search` can apply it. File format: docs/partition-plan.md ("format": "flexpipe-partition-plan").
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/ir/schedule.h"

namespace flexpipe {

struct PlannedStage {
  int operators = 0;                   // a contiguous range, following the previous stage's
  std::vector<std::string> recompute;  // operator names
  std::vector<std::string> offload;
  // The recompute checkpoints go to the host with the offloaded tensors and come back right before R.
  bool offload_checkpoints = false;
  nlohmann::json report;  // predictions, for people (the other fields are what tools read)
};

struct PartitionPlan {
  std::string model;  // zoo name or cost-graph file, as given to `partition`
  std::string graph;  // the graph's own name
  int graph_operators = 0;
  std::string hardware;
  std::string schedule;  // built-in name or file
  int devices = 0;
  int microbatches = 0;
  int chunks = 0;  // the schedule's -v (stages per device per pipeline); 0: its default
  Shape shape;
  double memory_limit = 0;    // bytes per device
  double host_bandwidth = 0;  // bytes per second
  std::string method;
  std::vector<PlannedStage> stages;  // per model chunk
  nlohmann::json summary;            // predictions and simulated figures, for people
};

// The plan applied to `graph`: throws Error (naming `origin`) when the graph is not the one the plan
// was made for (operator count, unknown operator names) or a name is in no stage's range.
Partition plan_partition(const PartitionPlan& plan, const CostGraph& graph, const std::string& origin);
std::vector<MemoryDecision> plan_decisions(const PartitionPlan& plan, const CostGraph& graph,
                                           const std::string& origin);
// Per global stage of a schedule with `num_pipelines` pipelines: whether the plan recomputes or
// offloads anything in that stage's chunk (the flags add_memory_actions takes).
std::vector<char> stages_that_recompute(const PartitionPlan& plan, int num_pipelines);
std::vector<char> stages_that_offload(const PartitionPlan& plan, int num_pipelines);  // checkpoints included
// Per global stage: whether the stage's chunk offloads its recompute checkpoints (RELOAD right before R).
std::vector<char> stages_that_offload_checkpoints(const PartitionPlan& plan, int num_pipelines);
// Per model chunk: the same flags, for AggregationOptions::offload_checkpoints.
std::vector<char> chunks_that_offload_checkpoints(const PartitionPlan& plan);
// The schedule with the R / OFFLOAD / RELOAD actions the plan's decisions need (add_memory_actions
// with the three flag vectors above); every pipeline's copy of a chunk runs the chunk's decisions.
Schedule with_plan_memory_actions(const PartitionPlan& plan, const Schedule& schedule);

}  // namespace flexpipe

namespace flexpipe {

// A plan made runnable: the schedule with R / OFFLOAD / RELOAD added where the plan recomputes or
// offloads (add_memory_actions), and the cost table aggregated with the plan's decisions.
struct AppliedPlan {
  Schedule schedule;
  CostTable costs;
  Partition partition;
  std::vector<MemoryDecision> decisions;
};
// `aggregation` supplies the links, capacity and data types; its shape and decisions are the plan's.
AppliedPlan apply_partition_plan(const PartitionPlan& plan, const CostGraph& graph, const Schedule& schedule,
                                 AggregationOptions aggregation, const std::string& origin);

}  // namespace flexpipe
