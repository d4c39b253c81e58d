// A partition plan applied to a graph and a schedule (docs/partition-plan.md).
#include "flexpipe/partition/plan.h"

#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "flexpipe/ir/memory_actions.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

Partition plan_partition(const PartitionPlan& plan, const CostGraph& graph, const std::string& origin) {
  const int n = static_cast<int>(graph.nodes.size());
  if (plan.graph_operators != n)
    throw Error(fmt::format("{}: the plan was made for '{}' with {} operators, but '{}' has {}", origin, plan.graph,
                            plan.graph_operators, graph.name, n));
  std::vector<int> sizes;
  for (const PlannedStage& stage : plan.stages) sizes.push_back(stage.operators);
  try {
    return partition_from_sizes(graph, sizes);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
}

std::vector<MemoryDecision> plan_decisions(const PartitionPlan& plan, const CostGraph& graph,
                                           const std::string& origin) {
  const Partition partition = plan_partition(plan, graph, origin);
  std::unordered_map<std::string, int> index;
  for (size_t v = 0; v < graph.nodes.size(); ++v) index.emplace(graph.nodes[v].name, static_cast<int>(v));
  std::vector<MemoryDecision> decisions(graph.nodes.size(), MemoryDecision::Keep);
  for (size_t k = 0; k < plan.stages.size(); ++k)
    for (const auto& [names, decision, key] :
         {std::tuple{&plan.stages[k].recompute, MemoryDecision::Recompute, "recompute"},
          std::tuple{&plan.stages[k].offload, MemoryDecision::Offload, "offload"}})
      for (const std::string& name : *names) {
        const auto found = index.find(name);
        if (found == index.end())
          throw Error(
              fmt::format("{}: stages[{}].{}: '{}' is not an operator of '{}'", origin, k, key, name, graph.name));
        if (partition.stage_of_node[found->second] != static_cast<int>(k))
          throw Error(fmt::format("{}: stages[{}].{}: operator '{}' belongs to stage {}", origin, k, key, name,
                                  partition.stage_of_node[found->second]));
        if (decisions[found->second] != MemoryDecision::Keep)
          throw Error(fmt::format("{}: stages[{}]: operator '{}' is both recomputed and offloaded", origin, k, name));
        decisions[found->second] = decision;
      }
  return decisions;
}

namespace {
bool offloads_checkpoints(const PlannedStage& stage) { return stage.offload_checkpoints && !stage.recompute.empty(); }

// The chunk flags repeated for every pipeline (each pipeline's copy of a chunk decides alike).
std::vector<char> per_global_stage(const PartitionPlan& plan, int num_pipelines, bool (*flag)(const PlannedStage&)) {
  std::vector<char> flags;
  for (int pipeline = 0; pipeline < num_pipelines; ++pipeline)
    for (const PlannedStage& stage : plan.stages) flags.push_back(flag(stage));
  return flags;
}
}  // namespace

std::vector<char> stages_that_recompute(const PartitionPlan& plan, int num_pipelines) {
  return per_global_stage(plan, num_pipelines, [](const PlannedStage& s) { return !s.recompute.empty(); });
}
std::vector<char> stages_that_offload(const PartitionPlan& plan, int num_pipelines) {
  return per_global_stage(plan, num_pipelines,
                          [](const PlannedStage& s) { return !s.offload.empty() || offloads_checkpoints(s); });
}
std::vector<char> stages_that_offload_checkpoints(const PartitionPlan& plan, int num_pipelines) {
  return per_global_stage(plan, num_pipelines, offloads_checkpoints);
}
std::vector<char> chunks_that_offload_checkpoints(const PartitionPlan& plan) {
  return stages_that_offload_checkpoints(plan, 1);
}

Schedule with_plan_memory_actions(const PartitionPlan& plan, const Schedule& schedule) {
  const int pipelines = schedule.num_pipelines;
  return add_memory_actions(schedule, stages_that_recompute(plan, pipelines), stages_that_offload(plan, pipelines),
                            stages_that_offload_checkpoints(plan, pipelines));
}

}  // namespace flexpipe

namespace flexpipe {

AppliedPlan apply_partition_plan(const PartitionPlan& plan, const CostGraph& graph, const Schedule& schedule,
                                 AggregationOptions aggregation, const std::string& origin) {
  if (static_cast<int>(plan.stages.size()) != schedule.stages_per_pipeline)
    throw Error(fmt::format("{}: the plan has {} stages but the schedule '{}' has {} per pipeline", origin,
                            plan.stages.size(), schedule.name, schedule.stages_per_pipeline));
  AppliedPlan applied;
  applied.partition = plan_partition(plan, graph, origin);
  applied.decisions = plan_decisions(plan, graph, origin);
  aggregation.shape = plan.shape;
  aggregation.decisions = applied.decisions;
  aggregation.offload_checkpoints = chunks_that_offload_checkpoints(plan);
  applied.costs = aggregate_stages(graph, applied.partition, aggregation).table;
  applied.schedule = with_plan_memory_actions(plan, schedule);
  return applied;
}

}  // namespace flexpipe
