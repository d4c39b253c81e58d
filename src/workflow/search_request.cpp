// flexpipe search's problem from its request: the model or cost table, batch splits, links, families and plans.
#include "flexpipe/workflow/search_request.h"

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/partition/plan.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

// The ways to cut --global-batch samples into micro-batches of whole samples: every divisor, from the
// fewest micro-batches that still feed every device to 8 per device.
std::vector<BatchSplit> batch_splits(const SearchRequest& o) {
  if (o.global_batch <= 0) {
    if (o.microbatches < 1)
      throw Error(o.costs.empty() ? "search: give -m (micro-batches per step) or --global-batch"
                                  : "search: give -m (micro-batches per step)");
    return {{o.microbatches, o.model.microbatch_size}};
  }
  if (o.microbatches > 0) {
    if (o.global_batch % o.microbatches != 0)
      throw Error(fmt::format("search: --global-batch {} does not split into {} micro-batches", o.global_batch,
                              o.microbatches));
    return {{o.microbatches, double(o.global_batch / o.microbatches)}};
  }
  std::vector<BatchSplit> out;
  for (int m = 1; m <= o.global_batch; ++m)
    if (o.global_batch % m == 0 && m >= std::min(o.devices, o.global_batch) && m <= 8 * o.devices)
      out.push_back({m, double(o.global_batch / m)});
  return out;
}

// The placement families of --families, and what each switches on.
constexpr std::string_view kFamilies[] = {"loop", "interleaved", "v", "bidirectional"};

void choose_families(const SearchRequest& o, SearchProblem& problem) {
  if (!o.families.empty()) {
    std::vector<std::string> chosen;
    for (size_t from = 0; from <= o.families.size();) {
      size_t comma = std::min(o.families.find(',', from), o.families.size());
      std::string name = o.families.substr(from, comma - from);
      name.erase(0, name.find_first_not_of(' '));
      name.erase(name.find_last_not_of(' ') + 1);
      if (std::find(std::begin(kFamilies), std::end(kFamilies), name) == std::end(kFamilies))
        throw Error(
            fmt::format("--families: '{}' is not a family; choose from loop, interleaved, v, bidirectional", name));
      chosen.push_back(name);
      from = comma + 1;
    }
    auto has = [&](std::string_view family) { return std::find(chosen.begin(), chosen.end(), family) != chosen.end(); };
    problem.single_stage_loop = has("loop");
    if (!has("interleaved")) problem.max_chunks = 1;
    problem.v_shape = has("v");
    problem.bidirectional = has("bidirectional");
  }
  if (o.no_bidirectional) problem.bidirectional = false;
  problem.recompute = !o.no_recompute;
  problem.offload = !o.no_offload;
}

// A per-stage cost table: recompute and offload only where it gives their costs.
StageCostProblem load_stage_costs(const std::string& path) {
  StatedCosts stated;
  StageCostProblem table;
  table.costs = load_cost_table(path, 0, &stated);
  table.name = std::filesystem::path(path).filename().string();
  table.recompute = stated.recompute;
  table.offload = stated.host_link;
  return table;
}

// A model's links between devices, to the host and between nodes: the command line's, else a measured
// graph's own link, else the hardware's. (A cost table gives its own links.) A graph in abstract time
// has no seconds for the hardware's rates: there the links it is not given are free, and without a
// host link nothing is offloaded.
void choose_links(const SearchRequest& o, const HardwareProfile& hardware, SearchProblem& problem) {
  const bool hardware_rates = rates_convert(problem.graph);
  const double link = o.link_bandwidth >= 0 ? o.link_bandwidth : hardware_rates ? hardware.nvlink_bandwidth : 0;
  problem.aggregation.device_link = {in_time_unit(o.link_latency, problem.graph.time_unit, "--link-latency"),
                                     link > 0 ? per_time_unit(problem.graph, link) : kInfinity};
  // A graph that measured its transport brings that link, unless the command line gives one.
  if (problem.graph.link && o.link_bandwidth < 0 && o.link_latency.value == 0)
    problem.aggregation.device_link = *problem.graph.link;
  const double host = o.host_bandwidth >= 0 ? o.host_bandwidth : hardware_rates ? hardware.pcie_bandwidth : 0;
  problem.aggregation.host_link = {0, host > 0 ? per_time_unit(problem.graph, host) : 0.0};
  if (o.devices_per_node > 0) {
    problem.aggregation.devices_per_node = o.devices_per_node;
    const double inter = o.inter_node_bandwidth >= 0 ? o.inter_node_bandwidth
                         : hardware_rates            ? hardware.infiniband_bandwidth
                                                     : 0;
    problem.aggregation.inter_node_link = {in_time_unit(o.inter_node_latency, problem.graph.time_unit,
                                                        "--inter-node-latency"),
                                           inter > 0 ? per_time_unit(problem.graph, inter) : kInfinity};
  } else if (o.inter_node_bandwidth >= 0 || o.inter_node_latency.value > 0) {
    throw Error("--inter-node-bandwidth and --inter-node-latency need --devices-per-node (which devices share a node)");
  }
}

// A partition plan searched beside the search's own partitions, on the placements with its stage count.
GivenPartition given_partition(const std::string& path, const SearchRequest& o, const SearchProblem& problem) {
  const PartitionPlan plan = load_partition_plan(path);
  GivenPartition given;
  given.name = std::filesystem::path(path).filename().string();
  given.partition = plan_partition(plan, problem.graph, path);
  given.decisions = plan_decisions(plan, problem.graph, path);
  given.offload_checkpoints = chunks_that_offload_checkpoints(plan);
  given.microbatch_size = plan.shape.microbatch_size;
  const bool size_searched = std::any_of(problem.batches.begin(), problem.batches.end(), [&](const BatchSplit& b) {
    return b.microbatch_size == given.microbatch_size;
  });
  if (!size_searched)
    throw Error(fmt::format("{}: the plan is for micro-batches of {} samples, which the search does not try", path,
                            given.microbatch_size));
  const int stages = given.partition.num_stages;
  if (stages % o.devices != 0 || stages / o.devices > std::max(o.max_chunks, 2))
    throw Error(fmt::format("{}: the plan has {} stages, no placement of {} devices searched has as many", path, stages,
                            o.devices));
  return given;
}

}  // namespace

SearchProblem search_problem(const SearchRequest& o, const std::function<void(const std::string&)>& reading) {
  if (o.devices < 1) throw Error("search: -p (devices) must be at least 1");
  if (o.model.model.empty() == o.costs.empty()) throw Error("search: give --model (a model) or --costs (a cost table)");
  const HardwareProfile& hardware = find_hardware(o.model.hardware);
  SearchProblem problem;
  if (!o.costs.empty()) {
    problem.stage_costs = load_stage_costs(o.costs);
    problem.graph.name = problem.stage_costs->name;
    // A table that names no unit ("unit", the default) prints its times bare.
    const std::string& time_unit = problem.stage_costs->costs.time_unit;
    problem.graph.time_unit = time_unit == "unit" ? "" : time_unit;
  } else {
    problem.graph = load_model_graph(o.model, reading);
  }
  choose_families(o, problem);
  problem.devices = o.devices;
  problem.batches = batch_splits(o);
  if (problem.batches.empty())
    throw Error(fmt::format("search: --global-batch {} has no split into {}..{} micro-batches", o.global_batch,
                            o.devices, 8 * o.devices));
  problem.seq_len = o.model.seq_len;
  // A cost table's own capacity unless --memory-limit replaces it.
  problem.memory_limit = o.memory_limit.value <= 0 ? (o.costs.empty() ? hardware.memory_bytes : kInfinity)
                         : o.costs.empty()
                             ? o.memory_limit.value
                             : in_memory_unit(o.memory_limit, problem.stage_costs->costs.memory_unit, "--memory-limit");
  problem.byte_units = byte_units_of(o.memory_limit);
  if (problem.max_chunks > 1) problem.max_chunks = o.max_chunks;
  if (o.costs.empty()) choose_links(o, hardware, problem);
  for (const std::string& path : o.plans) problem.partitions.push_back(given_partition(path, o, problem));
  return problem;
}

SearchRun run_search(const SearchRequest& request, const SearchHooks& hooks) {
  SearchRun run;
  run.problem = search_problem(request, hooks.reading);
  run.options.time_budget = request.time_budget;
  run.options.start = hooks.start;
  run.options.threads = request.threads > 0 ? request.threads : std::max(1u, std::thread::hardware_concurrency());
  run.options.local_search = !request.no_local_search;
  run.options.exact = !request.no_exact;
  run.options.partitioner = !request.no_partitioner;
  if (hooks.progress)
    run.options.progress = [&progress = hooks.progress, unit = run.problem.graph.time_unit](const SearchProgress& p) {
      progress(p, unit);
    };
  run.result = search_schedules(run.problem, run.options);
  return run;
}

}  // namespace flexpipe
