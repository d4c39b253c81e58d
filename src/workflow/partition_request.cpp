// flexpipe partition's planner from its request, and the advice when a model does not fit.
#include "flexpipe/workflow/partition_request.h"

#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

CheckedPlanner partition_planner(const PartitionRequest& o, std::chrono::steady_clock::time_point start,
                                 const PlannerProgress& progress) {
  if (o.model.microbatch_size != std::floor(o.model.microbatch_size))
    throw Error(fmt::format("--microbatch-size {}: the partitioner plans whole samples", o.model.microbatch_size));
  CostGraph graph = load_model_graph(o.model, progress.say);
  const HardwareProfile& hardware = find_hardware(o.model.hardware);
  Schedule schedule = load_checked_schedule(o.schedule);
  if (schedule.stages_per_pipeline > static_cast<int>(graph.nodes.size()))
    throw Error(fmt::format("the schedule has {} stages but '{}' has only {} operators", schedule.stages_per_pipeline,
                            graph.name, graph.nodes.size()));
  PlannerSettings settings;
  settings.model = o.model.model;
  settings.schedule = o.schedule.spec;
  settings.chunks = o.schedule.chunks;
  settings.microbatch_size = static_cast<int>(o.model.microbatch_size);
  settings.seq_len = o.model.seq_len;
  settings.memory_limit = o.memory_limit.value;
  // A graph in abstract time has no seconds for the hardware's rate: without one given, no host link.
  settings.host_bandwidth = o.host_bandwidth >= 0  ? o.host_bandwidth
                            : rates_convert(graph) ? hardware.pcie_bandwidth
                                                   : 0;
  settings.host_bandwidth_per_time_unit = per_time_unit(graph, settings.host_bandwidth);
  settings.solver = o.solver == "exact"    ? MemorySolver::Exact
                    : o.solver == "greedy" ? MemorySolver::Greedy
                                           : MemorySolver::Auto;
  settings.max_batch = o.max_batch;
  settings.max_batch_limit = o.max_batch_limit;
  settings.progress = progress.say;
  settings.should_stop = [tick = progress.tick, start, budget = o.time_budget] {
    if (tick) tick();
    return budget > 0 && std::chrono::steady_clock::now() - start >= std::chrono::duration<double>(budget);
  };
  return CheckedPlanner(std::move(graph), hardware, std::move(schedule), std::move(settings));
}

Quantity hardware_memory(const std::string& hardware) { return {find_hardware(hardware).memory_bytes, "GB"}; }

std::string does_not_fit(const CheckedPlan& out, const CheckedPlanner& planner, const PartitionRequest& o) {
  std::vector<std::string> tries = {"more devices"};
  if (out.microbatch_size > 1) tries.push_back("a smaller micro-batch");
  // 1F1B holds the fewest micro-batches of the built-ins.
  if (o.schedule.spec != "1f1b" && planner.schedule().name != "1f1b")
    tries.push_back("a schedule that holds fewer micro-batches (1f1b)");
  tries.push_back("a faster host link");
  std::string advice = tries.front();
  for (size_t i = 1; i < tries.size(); ++i) advice += (i + 1 == tries.size() ? " or " : ", ") + tries[i];
  const ByteUnits bytes = byte_units_of(o.memory_limit);
  return fmt::format(
      "{}: '{}' does not fit {} devices with {} each at micro-batch {} under {}: a device needs "
      "{} more even with every recompute and offload the method allows; try {}",
      partition_method_name(out.method), planner.graph().name, planner.schedule().num_devices,
      format_bytes(o.memory_limit.value, bytes), out.microbatch_size, planner.schedule().name,
      format_bytes(out.result.shortfall, bytes), advice);
}

}  // namespace flexpipe
