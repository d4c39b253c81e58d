// Models named on the command line: the zoo or a cost-graph file, and what a partition or a plan makes of them.
#include "flexpipe/workflow/model_inputs.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/quantity.h"
#include "flexpipe/workflow/partition_forms.h"

namespace flexpipe {

CostGraph load_model_graph(const NamedModel& options, const std::function<void(const std::string&)>& progress) {
  const HardwareProfile& hardware = find_hardware(options.hardware);
  // Zoo names contain dots ("gpt3-1.3b"): a name the zoo knows wins, then an existing file.
  bool in_zoo = false;
  for (const ModelConfig& config : model_zoo()) in_zoo |= config.name == options.model;
  if (!in_zoo && (std::filesystem::exists(options.model) || options.model.ends_with(".json"))) {
    if (progress) progress(fmt::format("reading {}", options.model));
    CostGraph graph = load_cost_graph(options.model);
    if (progress)
      progress(fmt::format("read {}: {} operators, {} edges", options.model, graph.nodes.size(), graph.edges.size()));
    return graph;
  }
  return build_model_graph(find_model(options.model), hardware,
                           {.flash_attention = options.flash_attention,
                            .microbatch_size = options.microbatch_size,
                            .seq_len = options.seq_len});
}

bool rates_convert(const CostGraph& graph) { return seconds_per_time_unit(graph.time_unit).has_value(); }

double per_time_unit(const CostGraph& graph, double per_second) {
  // No limit and no link read the same in every unit, an abstract one ("unit") included.
  if (per_second == 0 || std::isinf(per_second)) return per_second;
  if (const std::optional<double> seconds = seconds_per_time_unit(graph.time_unit)) return per_second * *seconds;
  throw Error(fmt::format("the graph '{}' measures time in '{}'; rates can be converted for ns, us, ms, s, min and h",
                          graph.name, graph.time_unit));
}

CostTable model_cost_table(const NamedModel& options, const std::string& partition, int stages) {
  const CostGraph graph = load_model_graph(options);
  const HardwareProfile& hardware = find_hardware(options.hardware);
  AggregationOptions aggregation;
  aggregation.shape = {options.microbatch_size, options.seq_len > 0 ? options.seq_len : graph.reference.seq_len};
  // A graph that measured its transport (`flexpipe profile --transport`) brings the link it was measured on.
  aggregation.device_link = graph.link ? *graph.link : Link{0, link_bandwidth_per_ms(hardware, Interconnect::NvLink)};
  aggregation.host_link = {0, link_bandwidth_per_ms(hardware, Interconnect::Pcie)};
  aggregation.memory_capacity = {hardware.memory_bytes};
  return aggregate_stages(graph, parse_partition(graph, partition, stages), aggregation).table;
}

AppliedPlan apply_plan_file(const std::string& path, const Schedule& schedule, double memory_limit) {
  const PartitionPlan plan = load_partition_plan(path);
  NamedModel model;
  model.model = plan.model;
  model.hardware = plan.hardware;
  model.microbatch_size = plan.shape.microbatch_size;
  model.seq_len = plan.shape.seq_len;
  const CostGraph graph = load_model_graph(model);
  const HardwareProfile& hardware = find_hardware(plan.hardware);
  AggregationOptions aggregation;
  aggregation.device_link = {0, link_bandwidth_per_ms(hardware, Interconnect::NvLink)};
  aggregation.host_link = {0, per_time_unit(graph, plan.host_bandwidth)};
  aggregation.memory_capacity = {memory_limit > 0 ? memory_limit : plan.memory_limit};
  return apply_partition_plan(plan, graph, schedule, aggregation, path);
}

}  // namespace flexpipe
