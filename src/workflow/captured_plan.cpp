// The plans train writes next to a captured graph, and the partition it makes when no --plan is given.
#include "flexpipe/workflow/captured_plan.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/train/rank_env.h"

namespace flexpipe {

std::string beside_graph(const std::string& captured_model, const std::string& name) {
  return std::filesystem::path(captured_model).replace_extension("").string() + "." + name;
}

std::string write_plan_beside_graph(const std::string& captured_model, const std::string& name,
                                    const PartitionPlan& plan) {
  const std::string path = beside_graph(captured_model, name);
  write_text_file(path, partition_plan_to_json(plan));
  return path;
}

PartitionRequest default_partition_request(const TrainRequest& o) {
  PartitionRequest request;
  request.model.model = o.command.captured_model;
  // The export runs the graph at the micro-batch it was captured with: the plan is made for that one.
  request.model.microbatch_size = o.command.request.captured_graph.reference.microbatch_size;
  request.schedule = o.command.schedule;
  request.schedule.spec = o.schedule;
  // train's own default for -p (2), not partition's (4): the plan is for the ranks this run starts.
  if (devices_from_command(request.schedule)) request.schedule.devices = pipeline_devices(o);
  request.memory_limit = hardware_memory(request.model.hardware);
  return request;
}

void partition_captured_model(TrainRequest& o) {
  const std::string& model = o.command.captured_model;
  if (runtime::in_launched_job())
    throw Error(fmt::format(
        "--model {}: without --plan the partition is made once, before any rank starts: run `flexpipe train "
        "--model {} ...` without a launcher around it (it starts its own ranks), or give every rank --plan PLAN.json "
        "(flexpipe partition --model {} -p P -m M -o PLAN.json)",
        model, model, model));
  // Without times every cut looks alike, and recomputing costs nothing: the plan would say nothing.
  const CostGraph& graph = o.command.request.captured_graph;
  if (graph.capture && graph.capture->repeats == 0)
    throw Error(fmt::format(
        "--model {}: no --plan, and the graph holds no operator times (its capture record says 0 repeats), so the "
        "partitioner has nothing to balance: capture it with `flexpipe capture` (which times every operator), or "
        "give --plan PLAN.json",
        model));
  const PartitionRequest request = default_partition_request(o);
  const CheckedPlanner planner = partition_planner(request, std::chrono::steady_clock::now(), {});
  const CheckedPlan out = planner.plan(parse_partition_method(request.method));
  if (!out.result.fits)
    throw Error(
        fmt::format("--model {}: no --plan, and the default partition does not fit {}'s memory: {}; or give "
                    "--plan PLAN.json made with a larger limit (flexpipe partition --model {} -p {} -m {} "
                    "--memory-limit SIZE -o PLAN.json)",
                    model, request.model.hardware, does_not_fit(out, planner, request), model,
                    planner.schedule().num_devices, planner.schedule().num_microbatches));
  o.command.plan = write_plan_beside_graph(model, "plan.json", out.plan);
  fmt::print(
      stderr,
      "--model {}: no --plan: partitioned for {} on {} devices with {} micro-batches ({}, memory limit {} of {}) into {}\n",
      model, planner.schedule().name, planner.schedule().num_devices, planner.schedule().num_microbatches,
      partition_method_name(out.method), format_bytes(request.memory_limit.value, byte_units_of(request.memory_limit)),
      request.model.hardware, o.command.plan);
  std::fflush(stderr);
  // The launched ranks train with this plan rather than partition again.
  AutoChoice choice;
  choice.schedule = o.schedule;
  choice.plan = o.command.plan;
  o.auto_choice = std::move(choice);
}

}  // namespace flexpipe
