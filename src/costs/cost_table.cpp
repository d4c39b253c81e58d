// The stage cost table: the uniform shorthand, its command-line form, its checks, link lookup and capacities.
#include "flexpipe/costs/cost_table.h"

#include <charconv>
#include <cmath>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

const Link& CostTable::link_between(int src, int dst) const {
  for (const LinkOverride& pair : pairs)
    if (pair.src == src && pair.dst == dst) return pair.link;
  return same_node(src, dst) ? link : inter_node_link;
}

double CostTable::capacity(int device) const {
  if (memory_capacity.empty()) return kInfinity;
  if (memory_capacity.size() == 1) return memory_capacity[0];
  if (device < 0 || device >= static_cast<int>(memory_capacity.size()))
    throw Error(fmt::format("memory_capacity has {} entries: none for device {}", memory_capacity.size(), device));
  return memory_capacity[device];
}

CostTable uniform_costs(int stages_per_pipeline, double forward, double backward_input, double backward_weight,
                        double comm) {
  StageCosts stage;
  stage.forward = forward;
  stage.backward_input = backward_input;
  stage.backward_weight = backward_weight;
  stage.backward = backward_input + backward_weight;
  stage.recompute = forward;
  stage.optimizer = 0;
  stage.activation_bytes = 1;
  stage.freed_by_input = 0;
  stage.checkpoint_bytes = 0;
  stage.parameter_bytes = 0;
  stage.gradient_bytes = 0;
  stage.optimizer_bytes = 0;
  stage.output_bytes = 0;
  CostTable costs;
  costs.stages.assign(stages_per_pipeline, stage);
  costs.link = Link{comm, kInfinity};
  return costs;
}

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

// A whole field as a finite number, or false.
bool parse_number(std::string_view text, double& value) {
  text = trim(text);
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && stop == end && std::isfinite(value);
}

}  // namespace

CostTable parse_uniform_costs(const std::string& text, int stages_per_pipeline) {
  static constexpr const char* kFieldNames[] = {"F", "I", "W", "COMM"};
  std::vector<std::string_view> fields;
  for (std::string_view rest = text;;) {
    const size_t comma = rest.find(',');
    fields.push_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  double values[4] = {0, 0, 0, 0};
  bool well_formed = fields.size() == 3 || fields.size() == 4;
  for (size_t i = 0; well_formed && i < fields.size(); ++i) well_formed = parse_number(fields[i], values[i]);
  if (!well_formed) throw Error(fmt::format("--uniform-costs: expected F,I,W[,COMM], got '{}'", text));
  for (size_t i = 0; i < fields.size(); ++i)
    if (values[i] < 0)
      throw Error(fmt::format("--uniform-costs: {} must not be negative, got '{}'", kFieldNames[i], text));
  return uniform_costs(stages_per_pipeline, values[0], values[1], values[2], values[3]);
}

std::string cost_table_problem(const CostTable& costs, int stages_per_pipeline, int devices,
                               const std::string& origin) {
  const size_t entries = costs.stages.size();
  if (entries != static_cast<size_t>(stages_per_pipeline)) {
    std::string message = fmt::format("{} stage {} for a schedule with {} stages per pipeline", entries,
                                      entries == 1 ? "entry" : "entries", stages_per_pipeline);
    if (entries == 1)
      message += fmt::format(
          " (one entry is not repeated for every stage: write it as \"all_stages\" with "
          "\"num_stages\": {})",
          stages_per_pipeline);
    return located(origin, 0, 0, message);
  }
  const size_t capacities = costs.memory_capacity.size();
  if (capacities > 1 && capacities != static_cast<size_t>(devices))
    return located(origin, 0, 0,
                   fmt::format("memory_capacity has {} entries for {} devices (give one number for every "
                               "device, or one entry per device)",
                               capacities, devices));
  for (size_t i = 0; i < costs.pairs.size(); ++i) {
    const LinkOverride& pair = costs.pairs[i];
    for (int device : {pair.src, pair.dst})
      if (device < 0 || device >= devices)
        return located(origin, 0, 0,
                       fmt::format("links[{}]: device {} does not exist in a schedule with {} devices", i, device,
                                   devices));
  }
  return "";
}

void check_cost_table(const CostTable& costs, int stages_per_pipeline, int devices, const std::string& origin) {
  if (std::string problem = cost_table_problem(costs, stages_per_pipeline, devices, origin); !problem.empty())
    throw Error(problem);
}

}  // namespace flexpipe
