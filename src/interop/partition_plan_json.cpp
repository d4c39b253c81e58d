// The partition plan's file format (docs/partition-plan.md).
#include "flexpipe/interop/partition_plan_json.h"

#include <array>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "json_reader.h"

namespace flexpipe {

namespace {
constexpr std::string_view kFormat = "flexpipe-partition-plan";
constexpr int kVersion = 1;
}  // namespace

std::string partition_plan_to_json(const PartitionPlan& plan) {
  nlohmann::ordered_json j = interop::format_header<nlohmann::ordered_json>(kFormat, kVersion);
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
  using interop::json_child;
  using interop::json_element;
  const nlohmann::json j = interop::parse_json_text(text, origin, "partition plan", interop::ColumnUnit::Byte);
  const interop::JsonPathReader read(origin);
  read.require_object(j, "");
  read.check_format_header(j, "partition plan", kFormat, kVersion);
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) read.fail("", fmt::format("missing \"{}\"", key));
    return j[key];
  };
  auto integer = [&](const char* key) { return read.count(field(key), key); };
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
    stage.operators = read.count(stages[k]["operators"], json_child(path, "operators"));
    if (stage.operators < 1) read.fail(json_child(path, "operators"), "must be a positive integer, got 0");
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

}  // namespace flexpipe
