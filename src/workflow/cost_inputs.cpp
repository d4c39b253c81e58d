// Stage costs as a command asks for them: a table, uniform costs or an aggregated model, then its overrides.
#include "flexpipe/workflow/cost_inputs.h"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

// "LATENCY[,BANDWIDTH]", both non-negative numbers, the bandwidth positive.
Link parse_inter_node_link(const std::string& text) {
  const auto fail = [&] {
    return Error(fmt::format(
        "--inter-node-link '{}': expected LATENCY[,BANDWIDTH], a latency of at least 0 and a positive bandwidth",
        text));
  };
  Link link;
  const size_t comma = text.find(',');
  try {
    size_t used = 0;
    const std::string latency = text.substr(0, comma);
    link.latency = std::stod(latency, &used);
    if (used != latency.size()) throw fail();
    if (comma != std::string::npos) {
      const std::string bandwidth = text.substr(comma + 1);
      link.bandwidth = std::stod(bandwidth, &used);
      if (used != bandwidth.size()) throw fail();
    }
  } catch (const std::invalid_argument&) {
    throw fail();
  } catch (const std::out_of_range&) {
    throw fail();
  }
  if (!(link.latency >= 0) || !(link.bandwidth > 0) || std::isinf(link.latency)) throw fail();
  return link;
}

}  // namespace

void apply_topology(const CostOptions& options, CostTable& costs) {
  if (options.devices_per_node <= 0) return;
  costs.devices_per_node = options.devices_per_node;
  costs.inter_node_link = options.inter_node_link.empty() ? Link{} : parse_inter_node_link(options.inter_node_link);
}

CostTable load_costs(const CostOptions& options, const Schedule& schedule) {
  CostTable costs;
  std::string origin = "--uniform-costs";
  if (!options.costs_file.empty()) {
    costs = load_cost_table(options.costs_file, schedule.stages_per_pipeline);
    origin = options.costs_file;
  } else if (!options.model.model.empty()) {
    costs = model_cost_table(options.model, options.partition, schedule.stages_per_pipeline);
    origin = options.model.model;
  } else {
    costs = parse_uniform_costs(options.uniform, schedule.stages_per_pipeline);
  }
  if (options.memory_limit.value > 0)
    costs.memory_capacity = {in_memory_unit(options.memory_limit, costs.memory_unit, "--memory-limit")};
  apply_topology(options, costs);
  check_cost_table(costs, schedule.stages_per_pipeline, schedule.num_devices, origin);
  return costs;
}

}  // namespace flexpipe
