// Partition plan file I/O and its application to a graph (docs/partition-plan.md).
#include "flexpipe/core/partition_plan.h"

#include <array>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "flexpipe/core/error.h"
#include "flexpipe/core/memory_actions.h"
#include "flexpipe/core/schedule_io.h"
#include "json_reader.h"

namespace flexpipe {

namespace {
constexpr std::string_view kFormat = "flexpipe-partition-plan";
constexpr int kVersion = 1;
}  // namespace

std::string partition_plan_to_json(const PartitionPlan& plan) {
  nlohmann::ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["model"] = plan.model;
  j["graph"] = plan.graph;
  j["graph_operators"] = plan.graph_operators;
  j["hardware"] = plan.hardware;
  j["schedule"] = plan.schedule;
  j["devices"] = plan.devices;
  j["microbatches"] = plan.microbatches;
  j["chunks"] = plan.chunks;
  j["microbatch_size"] = plan.shape.microbatch_size;
  j["seq_len"] = plan.shape.seq_len;
  j["memory_limit"] = plan.memory_limit;
  j["host_bandwidth"] = plan.host_bandwidth;
  j["method"] = plan.method;
  for (const auto& [key, value] : plan.summary.items()) j[key] = value;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const PlannedStage& stage : plan.stages) {
    nlohmann::ordered_json s;
    s["operators"] = stage.operators;
    s["recompute"] = stage.recompute;
    s["offload"] = stage.offload;
    if (stage.offload_checkpoints) s["offload_checkpoints"] = true;
    for (const auto& [key, value] : stage.report.items()) s[key] = value;
    stages.push_back(std::move(s));
  }
  j["stages"] = std::move(stages);
  return j.dump(2) + "\n";
}

PartitionPlan parse_partition_plan(const std::string& text, const std::string& origin) {
  using detail::json_child;
  using detail::json_element;
  const nlohmann::json j = detail::parse_json_text(text, origin, "partition plan", detail::ColumnUnit::Byte);
  const detail::JsonPathReader read(origin);
  read.require_object(j, "");
  if (!j.contains("format") || !j["format"].is_string() || j["format"] != kFormat)
    read.fail("format", fmt::format("not a partition plan (\"format\" must be \"{}\")", kFormat));
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"] != kVersion)
    read.fail("version", fmt::format("unsupported version (this build reads {})", kVersion));
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) read.fail("", fmt::format("missing \"{}\"", key));
    return j[key];
  };
  auto integer = [&](const char* key) {
    const double value = read.number(field(key), key);
    if (value != static_cast<int>(value)) read.fail(key, fmt::format("must be an integer, got {}", value));
    return static_cast<int>(value);
  };
  PartitionPlan plan;
  plan.model = read.text(field("model"), "model");
  plan.graph = read.text(field("graph"), "graph");
  plan.graph_operators = integer("graph_operators");
  plan.hardware = read.text(field("hardware"), "hardware");
  plan.schedule = read.text(field("schedule"), "schedule");
  plan.devices = integer("devices");
  plan.microbatches = integer("microbatches");
  plan.chunks = integer("chunks");
  plan.shape.microbatch_size = read.number(field("microbatch_size"), "microbatch_size");
  plan.shape.seq_len = read.number(field("seq_len"), "seq_len");
  plan.memory_limit = read.number(field("memory_limit"), "memory_limit");
  plan.host_bandwidth = read.number(field("host_bandwidth"), "host_bandwidth");
  plan.method = read.text(field("method"), "method");
  const nlohmann::json& stages = field("stages");
  if (!stages.is_array() || stages.empty()) read.fail("stages", "must be a non-empty array");
  for (size_t k = 0; k < stages.size(); ++k) {
    const std::string path = json_element("stages", k);
    read.require_object(stages[k], path);
    PlannedStage stage;
    if (!stages[k].contains("operators")) read.fail(path, "missing \"operators\"");
    const double count = read.number(stages[k]["operators"], json_child(path, "operators"));
    if (count < 1 || count != static_cast<int>(count))
      read.fail(json_child(path, "operators"), fmt::format("must be a positive integer, got {}", count));
    stage.operators = static_cast<int>(count);
    for (const char* key : {"recompute", "offload"}) {
      std::vector<std::string>& names = std::string_view(key) == "recompute" ? stage.recompute : stage.offload;
      if (!stages[k].contains(key)) continue;
      const nlohmann::json& list = stages[k][key];
      const std::string list_path = json_child(path, key);
      if (!list.is_array()) read.fail(list_path, "must be an array of operator names");
      for (size_t i = 0; i < list.size(); ++i) names.push_back(read.text(list[i], json_element(list_path, i)));
    }
    if (stages[k].contains("offload_checkpoints")) {
      const nlohmann::json& flag = stages[k]["offload_checkpoints"];
      if (!flag.is_boolean()) read.fail(json_child(path, "offload_checkpoints"), "must be true or false");
      stage.offload_checkpoints = flag.get<bool>();
    }
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

PartitionPlan load_partition_plan(const std::string& path) { return parse_partition_plan(read_text_file(path), path); }

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

std::vector<MemoryDecision> plan_decisions(const PartitionPlan& plan, const CostGraph& graph, const std::string& origin) {
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
          throw Error(fmt::format("{}: stages[{}].{}: '{}' is not an operator of '{}'", origin, k, key, name, graph.name));
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
