// The cost table's JSON file format (docs/cost-table.md): strict reading, with every error naming
// the file and the JSON path of the bad field, and a writer whose output reads back equal.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/support/quantity.h"
#include "json_quantity.h"
#include "json_reader.h"
#include "link_json.h"

namespace flexpipe {

namespace {

using interop::add_link_fields;
using interop::describe_json;
using interop::json_child;
using interop::json_element;
using interop::kLinkKeys;
using interop::link_json;
using interop::number_json;
using nlohmann::json;

constexpr std::string_view kFormat = "flexpipe-costs";
constexpr int kVersion = 1;

constexpr std::string_view kTopLevelKeys[] =
    {"format", "version", "time_unit", "memory_unit",     "stages",        "all_stages",       "num_stages",
     "link",   "links",   "host_link", "memory_capacity", "overlap_ratio", "devices_per_node", "inter_node_link"};
constexpr std::string_view kStageKeys[] =
    {"forward",         "backward_input",         "backward_weight", "backward",         "recompute",
     "optimizer",       "activation_bytes",       "freed_by_input",  "checkpoint_bytes", "parameter_bytes",
     "gradient_bytes",  "optimizer_bytes",        "output_bytes",    "offload_bytes",    "rebuilt_peak_bytes",
     "workspace_bytes", "checkpoint_until_weight"};
constexpr std::string_view kLinkOverrideKeys[] = {"src",      "dst",         "latency",       "bandwidth",
                                                  "send_cpu", "receive_cpu", "cpu_bandwidth", "rendezvous"};

// Reads one parsed document; every failure names the origin and the JSON path.
class Reader : public interop::JsonPathReader {
 public:
  Reader(const std::string& origin, int expected_stages) : JsonPathReader(origin), expected_stages_(expected_stages) {}

  // A time, size or bandwidth: a number in the table's unit, or a string with a unit converted into it.
  double quantity(const json& value, const std::string& path, QuantityKind kind) const {
    return interop::quantity_in_declared_units(*this, value, path, kind, units_);
  }

  // null stands for "no limit" (infinite bandwidth, unlimited memory).
  double quantity_or_unlimited(const json& value, const std::string& path, QuantityKind kind) const {
    if (value.is_null()) return kInfinity;
    if (!value.is_number() && !value.is_string())
      fail(path, fmt::format("expected a number or null, got {}", describe_json(value)));
    return quantity(value, path, kind);
  }

  int count(const json& value, const std::string& path) const {
    if (!value.is_number_integer()) fail(path, fmt::format("expected an integer, got {}", describe_json(value)));
    if (!value.is_number_unsigned()) fail(path, fmt::format("must not be negative, got {}", value.dump()));
    if (value.get<uint64_t>() > INT32_MAX) fail(path, fmt::format("is too large, got {}", value.dump()));
    return value.get<int>();
  }

  StageCosts stage(const json& object, const std::string& path) const {
    require_object(object, path);
    only_known_keys(object, path, kStageKeys);
    StageCosts costs;
    auto read = [&](std::string_view key, QuantityKind kind, double& field) {
      const std::string name(key);
      if (object.contains(name)) field = quantity(object[name], json_child(path, key), kind);
    };
    const auto time = QuantityKind::Time;
    const auto size = QuantityKind::Size;
    read("forward", time, costs.forward);
    read("backward_input", time, costs.backward_input);
    read("backward_weight", time, costs.backward_weight);
    costs.backward = costs.backward_input + costs.backward_weight;
    read("backward", time, costs.backward);
    costs.recompute = costs.forward;
    read("recompute", time, costs.recompute);
    read("optimizer", time, costs.optimizer);
    read("activation_bytes", size, costs.activation_bytes);
    read("freed_by_input", size, costs.freed_by_input);
    read("checkpoint_bytes", size, costs.checkpoint_bytes);
    read("parameter_bytes", size, costs.parameter_bytes);
    read("gradient_bytes", size, costs.gradient_bytes);
    read("optimizer_bytes", size, costs.optimizer_bytes);
    read("output_bytes", size, costs.output_bytes);
    // Optional; null or absent: OFFLOAD moves everything the micro-batch holds.
    if (object.contains("offload_bytes"))
      costs.offload_bytes = quantity_or_unlimited(object["offload_bytes"], json_child(path, "offload_bytes"), size);
    // Optional; null or absent: R's rebuild holds all of activation_bytes.
    if (object.contains("rebuilt_peak_bytes"))
      costs.rebuilt_peak_bytes =
          quantity_or_unlimited(object["rebuilt_peak_bytes"], json_child(path, "rebuilt_peak_bytes"), size);
    read("workspace_bytes", size, costs.workspace_bytes);  // optional; absent: no transient memory
    if (object.contains("checkpoint_until_weight")) {      // optional; absent: released at I
      const json& flag = object["checkpoint_until_weight"];
      if (!flag.is_boolean()) fail(json_child(path, "checkpoint_until_weight"), "must be true or false");
      costs.checkpoint_until_weight = flag.get<bool>();
    }
    if (costs.freed_by_input > costs.activation_bytes)
      fail(json_child(path, "freed_by_input"),
           fmt::format("{} exceeds activation_bytes {}", costs.freed_by_input, costs.activation_bytes));
    return costs;
  }

  // Fields left out keep their value in `defaults`.
  Link link(const json& object, const std::string& path, const Link& defaults) const {
    return interop::read_link_fields(*this, object, path, defaults, units_);
  }

  CostTable table(const json& document, StatedCosts* stated) {
    if (!document.is_object())
      fail("", fmt::format("expected a JSON object at the top level, got {}", describe_json(document)));
    only_known_keys(document, "", kTopLevelKeys);

    check_format_header(document, "cost table", kFormat, kVersion);

    CostTable costs;
    if (document.contains("time_unit")) costs.time_unit = text(document["time_unit"], "time_unit");
    if (document.contains("memory_unit")) costs.memory_unit = text(document["memory_unit"], "memory_unit");
    // Read before any quantity: every written unit is converted into these.
    units_ = {costs.time_unit, costs.memory_unit};
    read_stages(document, costs);

    if (document.contains("link")) {
      require_object(document["link"], "link");
      only_known_keys(document["link"], "link", kLinkKeys);
      costs.link = link(document["link"], "link", Link{});
    }
    if (document.contains("devices_per_node")) {
      costs.devices_per_node = count(document["devices_per_node"], "devices_per_node");
      if (costs.devices_per_node < 1) fail("devices_per_node", "must be at least 1");
    }
    if (document.contains("inter_node_link")) {
      if (costs.devices_per_node == 0)
        fail("inter_node_link", "needs \"devices_per_node\" (which devices share a node)");
      require_object(document["inter_node_link"], "inter_node_link");
      only_known_keys(document["inter_node_link"], "inter_node_link", kLinkKeys);
      costs.inter_node_link = link(document["inter_node_link"], "inter_node_link", Link{});
    }
    if (document.contains("links")) read_link_overrides(document["links"], costs);
    if (document.contains("host_link") && document["host_link"].is_null()) {
      costs.host_link = kNoHostLink;
    } else if (document.contains("host_link")) {
      require_object(document["host_link"], "host_link");
      only_known_keys(document["host_link"], "host_link", kLinkKeys);
      costs.host_link = link(document["host_link"], "host_link", Link{});
    }
    if (document.contains("memory_capacity")) {
      const json& capacity = document["memory_capacity"];
      if (capacity.is_array()) {
        for (size_t i = 0; i < capacity.size(); ++i)
          costs.memory_capacity.push_back(
              quantity_or_unlimited(capacity[i], json_element("memory_capacity", i), QuantityKind::Size));
      } else if (capacity.is_number() || capacity.is_string()) {
        costs.memory_capacity.push_back(quantity(capacity, "memory_capacity", QuantityKind::Size));
      } else {
        fail("memory_capacity",
             fmt::format("expected a number or an array of numbers, got {}", describe_json(capacity)));
      }
    }
    if (document.contains("overlap_ratio")) costs.overlap_ratio = number(document["overlap_ratio"], "overlap_ratio");
    if (stated) {
      stated->host_link = document.contains("host_link") && !document["host_link"].is_null();
      stated->recompute.clear();
      if (document.contains("stages"))
        for (const json& entry : document["stages"]) stated->recompute.push_back(entry.contains("recompute"));
      else
        stated->recompute.assign(costs.stages.size(), document["all_stages"].contains("recompute"));
    }
    return costs;
  }

 private:
  void read_stages(const json& document, CostTable& costs) const {
    const bool listed = document.contains("stages");
    const bool shared = document.contains("all_stages");
    if (listed && shared) fail("all_stages", "cannot be combined with \"stages\"");
    if (listed) {
      if (document.contains("num_stages")) fail("num_stages", "goes with \"all_stages\", not with \"stages\"");
      const json& stages = document["stages"];
      if (!stages.is_array())
        fail("stages", fmt::format("expected an array of objects, got {}", describe_json(stages)));
      if (stages.empty()) fail("stages", "needs at least one stage");
      for (size_t i = 0; i < stages.size(); ++i) costs.stages.push_back(stage(stages[i], json_element("stages", i)));
    } else if (shared) {
      if (!document.contains("num_stages"))
        fail("all_stages", "needs \"num_stages\" (how many stages share these costs)");
      const int count_of_stages = count(document["num_stages"], "num_stages");
      if (count_of_stages == 0) fail("num_stages", "must be at least 1, got 0");
      // Checked before anything is allocated: a 100-byte file must not ask for gigabytes.
      if (expected_stages_ > 0 && count_of_stages != expected_stages_)
        fail("num_stages",
             fmt::format("{} stages for a schedule with {} stages per pipeline", count_of_stages, expected_stages_));
      if (count_of_stages > kMaxStages)
        fail("num_stages",
             fmt::format("is too large, got {} (a schedule has at most {} stages)", count_of_stages, kMaxStages));
      costs.stages.assign(count_of_stages, stage(document["all_stages"], "all_stages"));
    } else {
      fail("", "no stage costs: give \"stages\" (one entry per stage) or \"all_stages\" with \"num_stages\"");
    }
  }

  void read_link_overrides(const json& links, CostTable& costs) const {
    if (!links.is_array()) fail("links", fmt::format("expected an array of objects, got {}", describe_json(links)));
    for (size_t i = 0; i < links.size(); ++i) {
      const std::string path = json_element("links", i);
      const json& entry = links[i];
      require_object(entry, path);
      only_known_keys(entry, path, kLinkOverrideKeys);
      LinkOverride pair;
      for (const std::string key : {"src", "dst"})
        if (!entry.contains(key)) fail(json_child(path, key), "missing (a link names its \"src\" and \"dst\" devices)");
      pair.src = count(entry["src"], json_child(path, "src"));
      pair.dst = count(entry["dst"], json_child(path, "dst"));
      if (pair.src == pair.dst) fail(path, fmt::format("src and dst are both device {}", pair.src));
      for (size_t j = 0; j < costs.pairs.size(); ++j)
        if (costs.pairs[j].src == pair.src && costs.pairs[j].dst == pair.dst)
          fail(path, fmt::format("repeats the link {} -> {} of links[{}]", pair.src, pair.dst, j));
      pair.link = link(entry, path, costs.link);
      costs.pairs.push_back(pair);
    }
  }

  int expected_stages_;           // 0: any number
  interop::DeclaredUnits units_;  // the table's own, once read
};

nlohmann::ordered_json stage_json(const StageCosts& stage) {
  nlohmann::ordered_json out;
  out["forward"] = number_json(stage.forward);
  out["backward_input"] = number_json(stage.backward_input);
  out["backward_weight"] = number_json(stage.backward_weight);
  out["backward"] = number_json(stage.backward);
  out["recompute"] = number_json(stage.recompute);
  out["optimizer"] = number_json(stage.optimizer);
  out["activation_bytes"] = number_json(stage.activation_bytes);
  out["freed_by_input"] = number_json(stage.freed_by_input);
  out["checkpoint_bytes"] = number_json(stage.checkpoint_bytes);
  out["parameter_bytes"] = number_json(stage.parameter_bytes);
  out["gradient_bytes"] = number_json(stage.gradient_bytes);
  out["optimizer_bytes"] = number_json(stage.optimizer_bytes);
  out["output_bytes"] = number_json(stage.output_bytes);
  if (std::isfinite(stage.offload_bytes)) out["offload_bytes"] = number_json(stage.offload_bytes);
  if (std::isfinite(stage.rebuilt_peak_bytes)) out["rebuilt_peak_bytes"] = number_json(stage.rebuilt_peak_bytes);
  if (stage.workspace_bytes > 0) out["workspace_bytes"] = number_json(stage.workspace_bytes);
  if (stage.checkpoint_until_weight) out["checkpoint_until_weight"] = true;
  return out;
}

}  // namespace

CostTable parse_cost_table(const std::string& text, const std::string& origin, int expected_stages,
                           StatedCosts* stated) {
  const json document = interop::parse_json_text(text, origin, "invalid JSON", interop::ColumnUnit::Byte);
  return Reader(origin, expected_stages).table(document, stated);
}

CostTable load_cost_table(const std::string& path, int expected_stages, StatedCosts* stated) {
  return parse_cost_table(read_text_file(path), path, expected_stages, stated);
}

std::string cost_table_to_json(const CostTable& costs) {
  nlohmann::ordered_json out = interop::format_header<nlohmann::ordered_json>(kFormat, kVersion);
  out["time_unit"] = costs.time_unit;
  out["memory_unit"] = costs.memory_unit;
  const bool all_equal =
      !costs.stages.empty() && std::all_of(costs.stages.begin(), costs.stages.end(),
                                           [&](const StageCosts& s) { return s == costs.stages.front(); });
  if (all_equal) {
    out["num_stages"] = costs.stages.size();
    out["all_stages"] = stage_json(costs.stages.front());
  } else {
    out["stages"] = nlohmann::ordered_json::array();
    for (const StageCosts& stage : costs.stages) out["stages"].push_back(stage_json(stage));
  }
  out["link"] = link_json(costs.link);
  if (costs.devices_per_node > 0) {
    out["devices_per_node"] = costs.devices_per_node;
    out["inter_node_link"] = link_json(costs.inter_node_link);
  }
  if (!costs.pairs.empty()) {
    out["links"] = nlohmann::ordered_json::array();
    for (const LinkOverride& pair : costs.pairs) {
      nlohmann::ordered_json entry;
      entry["src"] = pair.src;
      entry["dst"] = pair.dst;
      add_link_fields(entry, pair.link);
      out["links"].push_back(entry);
    }
  }
  // No host link (nothing can be offloaded) is null, since a link's bandwidth must be positive.
  if (costs.host_link.bandwidth == 0)
    out["host_link"] = nullptr;
  else
    out["host_link"] = link_json(costs.host_link);
  if (costs.memory_capacity.size() == 1 && std::isfinite(costs.memory_capacity[0])) {
    out["memory_capacity"] = number_json(costs.memory_capacity[0]);
  } else if (!costs.memory_capacity.empty()) {
    out["memory_capacity"] = nlohmann::ordered_json::array();
    for (double capacity : costs.memory_capacity) out["memory_capacity"].push_back(number_json(capacity));
  }
  out["overlap_ratio"] = number_json(costs.overlap_ratio);
  return out.dump(2) + "\n";
}

}  // namespace flexpipe
