// A partition's forms: --partition text, a Partition of a graph's operators, and a partition plan.
#include "flexpipe/workflow/partition_forms.h"

#include <algorithm>
#include <exception>

#include <fmt/format.h>

#include "flexpipe/interop/megatron_layout.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

// "4,8,6,6" after a prefix; names the bad field.
std::vector<int> counts(const std::string& text, const std::string& what) {
  std::vector<int> result;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string field = text.substr(start, comma - start);
    size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(field, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != field.size() || field.empty() || value < 0)
      throw Error(fmt::format("--partition {}: '{}' is not a count (field {})", what, field, result.size() + 1));
    result.push_back(value);
    start = comma + 1;
  }
  return result;
}

}  // namespace

Partition parse_partition(const CostGraph& graph, const std::string& spec, int stages) {
  Partition partition;
  if (spec.empty())
    partition = partition_evenly(graph, stages);
  else if (spec.rfind("layers:", 0) == 0)
    partition = partition_from_layer_counts(graph, counts(spec.substr(7), "layers:"));
  else if (spec.rfind("ops:", 0) == 0)
    partition = partition_from_sizes(graph, counts(spec.substr(4), "ops:"));
  else
    partition = partition_from_megatron_layout(graph, spec);
  if (partition.num_stages != stages)
    throw Error(fmt::format("--partition makes {} stages but the schedule has {}", partition.num_stages, stages));
  return partition;
}

std::string operators_spec(const Partition& partition) {
  return fmt::format("ops:{}", fmt::join(operators_per_stage(partition), ","));
}

PartitionPlan plan_of_partition(const CostGraph& graph, const Partition& partition, const PlanContext& context) {
  PartitionPlan plan;
  plan.model = context.model;
  plan.graph = graph.name;
  plan.graph_operators = static_cast<int>(graph.nodes.size());
  plan.hardware = graph.hardware ? graph.hardware->name : "cpu";
  plan.schedule = context.schedule;
  plan.devices = context.devices;
  plan.microbatches = context.microbatches;
  plan.chunks = partition.num_stages / context.devices;
  plan.shape = graph.reference;
  plan.memory_limit = 0;
  plan.host_bandwidth = 0;
  plan.method = context.method;
  int begin = 0;
  for (int size : operators_per_stage(partition)) {
    PlannedStage stage;
    stage.operators = size;
    stage.report = {{"first", graph.nodes[begin].name}, {"last", graph.nodes[begin + size - 1].name}};
    begin += size;
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

}  // namespace flexpipe
