// The cost graph's JSON file format (docs/cost-graph.md): strict reading, every error naming the file
// and the JSON path of the bad field, and a writer whose output reads back equal.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/core/cost_graph.h"
#include "flexpipe/core/error.h"
#include "flexpipe/core/schedule_io.h"

namespace flexpipe {

namespace {

using nlohmann::json;
using ordered = nlohmann::ordered_json;

constexpr std::string_view kFormat = "flexpipe-cost-graph";
constexpr int kVersion = 1;

constexpr std::string_view kTopLevelKeys[] = {"format", "version",  "name",   "time_unit", "reference",
                                              "hardware", "layers", "nodes", "edges"};
constexpr std::string_view kReferenceKeys[] = {"microbatch_size", "seq_len"};
constexpr std::string_view kHardwareKeys[] = {"name", "flop_rate", "byte_rate"};
constexpr std::string_view kLayerKeys[] = {"name", "role"};
constexpr std::string_view kNodeKeys[] = {"name",           "kind",           "layer",           "parameters",
                                          "active_parameters", "tied_to",     "scaling",         "forward",
                                          "backward_input", "backward_weight", "saved_bytes",     "freed_by_input",
                                          "output_bytes",   "workspace_bytes"};
constexpr std::string_view kPassKeys[] = {"time", "flops", "bytes"};
constexpr std::string_view kPolynomialKeys[] = {"fixed", "per_sample", "per_token", "per_token_seq"};
constexpr std::string_view kScalingKeys[] = {"rule", "batch_exponent", "sequence_exponent"};
constexpr std::string_view kEdgeKeys[] = {"from", "to", "bytes"};
constexpr std::pair<std::string_view, LayerRole> kRoles[] = {{"embedding", LayerRole::Embedding},
                                                             {"transformer", LayerRole::Transformer},
                                                             {"mtp", LayerRole::Mtp},
                                                             {"loss", LayerRole::Loss},
                                                             {"other", LayerRole::Other}};

std::string describe(const json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "an array";
  return value.dump();
}

std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : fmt::format("{}.{}", path, key);
}

std::string element(const std::string& path, size_t index) { return fmt::format("{}[{}]", path, index); }

class Reader {
 public:
  explicit Reader(const std::string& origin) : origin_(origin) {}

  CostGraph graph(const json& document) {
    if (!document.is_object()) fail("", fmt::format("expected a JSON object at the top level, got {}", describe(document)));
    only_known_keys(document, "", kTopLevelKeys);
    if (!document.contains("format"))
      fail("format", fmt::format("missing (a cost graph starts with \"format\": \"{}\")", kFormat));
    if (text(document["format"], "format") != kFormat)
      fail("format", fmt::format("expected \"{}\", got {}", kFormat, document["format"].dump()));
    if (!document.contains("version")) fail("version", fmt::format("missing (expected {})", kVersion));
    if (!document["version"].is_number_integer() || document["version"].get<int64_t>() != kVersion)
      fail("version", fmt::format("unsupported version {} (this build reads version {})", document["version"].dump(), kVersion));

    CostGraph result;
    if (document.contains("name")) result.name = text(document["name"], "name");
    if (document.contains("time_unit")) result.time_unit = text(document["time_unit"], "time_unit");
    if (document.contains("reference")) {
      const json& reference = document["reference"];
      require_object(reference, "reference");
      only_known_keys(reference, "reference", kReferenceKeys);
      if (reference.contains("microbatch_size"))
        result.reference.microbatch_size = positive(reference["microbatch_size"], "reference.microbatch_size");
      if (reference.contains("seq_len")) result.reference.seq_len = positive(reference["seq_len"], "reference.seq_len");
    }
    if (document.contains("hardware")) {
      const json& hardware = document["hardware"];
      require_object(hardware, "hardware");
      only_known_keys(hardware, "hardware", kHardwareKeys);
      RooflineRates rates;
      if (hardware.contains("name")) rates.name = text(hardware["name"], "hardware.name");
      for (const char* key : {"flop_rate", "byte_rate"})
        if (!hardware.contains(key)) fail(child("hardware", key), "missing");
      rates.flop_rate = positive(hardware["flop_rate"], "hardware.flop_rate");
      rates.byte_rate = positive(hardware["byte_rate"], "hardware.byte_rate");
      result.hardware = rates;
    }
    if (document.contains("layers")) read_layers(document["layers"], result);
    if (!document.contains("nodes")) fail("nodes", "missing (a cost graph lists its operators)");
    read_nodes(document["nodes"], result);
    if (document.contains("edges")) read_edges(document["edges"], result);
    return result;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw Error(located(origin_, 0, 0, path.empty() ? message : fmt::format("{}: {}", path, message)));
  }

  void require_object(const json& value, const std::string& path) const {
    if (!value.is_object()) fail(path, fmt::format("expected an object, got {}", describe(value)));
  }

  void only_known_keys(const json& object, const std::string& path, std::span<const std::string_view> known) const {
    for (const auto& [key, value] : object.items()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string list;
      for (std::string_view k : known) list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
      fail(child(path, key), fmt::format("unknown key (known keys: {})", list));
    }
  }

  double number(const json& value, const std::string& path) const {
    if (!value.is_number()) fail(path, fmt::format("expected a number, got {}", describe(value)));
    const double result = value.get<double>();
    if (result < 0) fail(path, fmt::format("must not be negative, got {}", value.dump()));
    return result;
  }

  double positive(const json& value, const std::string& path) const {
    const double result = number(value, path);
    if (result == 0) fail(path, "must be positive, got 0");
    return result;
  }

  std::string text(const json& value, const std::string& path) const {
    if (!value.is_string()) fail(path, fmt::format("expected a string, got {}", describe(value)));
    return value.get<std::string>();
  }

  const json& array(const json& value, const std::string& path) const {
    if (!value.is_array()) fail(path, fmt::format("expected an array, got {}", describe(value)));
    return value;
  }

  // A bare number is a fixed amount; an object spells the terms.
  ShapePolynomial polynomial(const json& value, const std::string& path) const {
    if (value.is_number()) return fixed_amount(number(value, path));
    if (!value.is_object())
      fail(path, fmt::format("expected a number or an object of shape terms, got {}", describe(value)));
    only_known_keys(value, path, kPolynomialKeys);
    ShapePolynomial result;
    auto read = [&](const char* key, double& field) {
      if (value.contains(key)) field = number(value[key], child(path, key));
    };
    read("fixed", result.fixed);
    read("per_sample", result.per_sample);
    read("per_token", result.per_token);
    read("per_token_seq", result.per_token_seq);
    return result;
  }

  PassCost pass(const json& value, const std::string& path) const {
    require_object(value, path);
    only_known_keys(value, path, kPassKeys);
    PassCost result;
    if (value.contains("time")) result.time = number(value["time"], child(path, "time"));
    if (value.contains("flops")) result.flops = polynomial(value["flops"], child(path, "flops"));
    if (value.contains("bytes")) result.bytes = polynomial(value["bytes"], child(path, "bytes"));
    return result;
  }

  Scaling scaling(const json& value, const std::string& path) const {
    require_object(value, path);
    only_known_keys(value, path, kScalingKeys);
    if (!value.contains("rule")) fail(child(path, "rule"), "missing (\"roofline\" or \"power\")");
    const std::string rule = text(value["rule"], child(path, "rule"));
    Scaling result;
    if (rule == "roofline") {
      result.rule = ScalingRule::Roofline;
      for (const char* key : {"batch_exponent", "sequence_exponent"})
        if (value.contains(key)) fail(child(path, key), "only goes with \"rule\": \"power\"");
    } else if (rule == "power") {
      result.rule = ScalingRule::Power;
      if (value.contains("batch_exponent"))
        result.batch_exponent = number(value["batch_exponent"], child(path, "batch_exponent"));
      if (value.contains("sequence_exponent"))
        result.sequence_exponent = number(value["sequence_exponent"], child(path, "sequence_exponent"));
    } else {
      fail(child(path, "rule"), fmt::format("expected \"roofline\" or \"power\", got {}", value["rule"].dump()));
    }
    return result;
  }

  void read_layers(const json& layers, CostGraph& result) {
    array(layers, "layers");
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string path = element("layers", i);
      const json& entry = layers[i];
      require_object(entry, path);
      only_known_keys(entry, path, kLayerKeys);
      if (!entry.contains("name")) fail(child(path, "name"), "missing");
      LayerInfo layer;
      layer.name = text(entry["name"], child(path, "name"));
      if (entry.contains("role")) {
        const std::string role = text(entry["role"], child(path, "role"));
        const auto* found = std::find_if(std::begin(kRoles), std::end(kRoles), [&](const auto& r) { return r.first == role; });
        if (found == std::end(kRoles))
          fail(child(path, "role"),
               fmt::format("expected one of embedding, transformer, mtp, loss, other; got {}", entry["role"].dump()));
        layer.role = found->second;
      }
      if (!layer_index_.emplace(layer.name, static_cast<int>(i)).second)
        fail(child(path, "name"), fmt::format("layer '{}' is defined twice", layer.name));
      result.layers.push_back(layer);
    }
  }

  void read_nodes(const json& nodes, CostGraph& result) {
    array(nodes, "nodes");
    // Names first, so that tied_to may point at any node and the error for a missing one is exact.
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string path = element("nodes", i);
      require_object(nodes[i], path);
      if (!nodes[i].contains("name")) fail(child(path, "name"), "missing");
      const std::string name = text(nodes[i]["name"], child(path, "name"));
      if (auto [it, inserted] = node_index_.emplace(name, static_cast<int>(i)); !inserted)
        fail(child(path, "name"), fmt::format("'{}' is already the name of nodes[{}]", name, it->second));
    }
    for (size_t i = 0; i < nodes.size(); ++i) result.nodes.push_back(node(nodes[i], element("nodes", i)));
  }

  OperatorNode node(const json& entry, const std::string& path) const {
    only_known_keys(entry, path, kNodeKeys);
    OperatorNode result;
    result.name = entry["name"].get<std::string>();
    if (entry.contains("kind")) result.kind = text(entry["kind"], child(path, "kind"));
    if (entry.contains("layer")) {
      const std::string layer = text(entry["layer"], child(path, "layer"));
      const auto found = layer_index_.find(layer);
      if (found == layer_index_.end())
        fail(child(path, "layer"), fmt::format("unknown layer '{}' (define it in \"layers\")", layer));
      result.layer = found->second;
    }
    if (entry.contains("parameters")) result.parameters = number(entry["parameters"], child(path, "parameters"));
    result.active_parameters = result.parameters;
    if (entry.contains("active_parameters"))
      result.active_parameters = number(entry["active_parameters"], child(path, "active_parameters"));
    if (entry.contains("tied_to")) {
      const std::string owner = text(entry["tied_to"], child(path, "tied_to"));
      const auto found = node_index_.find(owner);
      if (found == node_index_.end()) fail(child(path, "tied_to"), fmt::format("unknown node '{}'", owner));
      result.tied_to = found->second;
    }
    if (entry.contains("scaling")) result.scaling = scaling(entry["scaling"], child(path, "scaling"));
    if (entry.contains("forward")) result.forward = pass(entry["forward"], child(path, "forward"));
    if (entry.contains("backward_input"))
      result.backward_input = pass(entry["backward_input"], child(path, "backward_input"));
    if (entry.contains("backward_weight"))
      result.backward_weight = pass(entry["backward_weight"], child(path, "backward_weight"));
    auto read = [&](const char* key, ShapePolynomial& field) {
      if (entry.contains(key)) field = polynomial(entry[key], child(path, key));
    };
    read("saved_bytes", result.saved_bytes);
    read("freed_by_input", result.freed_by_input);
    read("output_bytes", result.output_bytes);
    read("workspace_bytes", result.workspace_bytes);
    return result;
  }

  void read_edges(const json& edges, CostGraph& result) const {
    array(edges, "edges");
    for (size_t i = 0; i < edges.size(); ++i) {
      const std::string path = element("edges", i);
      const json& entry = edges[i];
      require_object(entry, path);
      only_known_keys(entry, path, kEdgeKeys);
      TensorEdge edge;
      edge.from = endpoint(entry, path, "from");
      edge.to = endpoint(entry, path, "to");
      if (entry.contains("bytes")) edge.bytes = polynomial(entry["bytes"], child(path, "bytes"));
      result.edges.push_back(edge);
    }
  }

  int endpoint(const json& entry, const std::string& path, const char* key) const {
    if (!entry.contains(key)) fail(child(path, key), "missing (an edge names its \"from\" and \"to\" nodes)");
    const std::string name = text(entry[key], child(path, key));
    const auto found = node_index_.find(name);
    if (found == node_index_.end()) fail(child(path, key), fmt::format("unknown node '{}' (dangling edge)", name));
    return found->second;
  }

  const std::string& origin_;
  std::unordered_map<std::string, int> layer_index_;
  std::unordered_map<std::string, int> node_index_;
};

std::pair<int, int> line_and_column(const std::string& text, size_t byte) {
  const size_t offset = std::min(byte == 0 ? 0 : byte - 1, text.size());
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') ++line, line_start = i + 1;
  return {line, static_cast<int>(offset - line_start) + 1};
}

std::string syntax_message(const json::parse_error& error) {
  std::string_view message = error.what();
  const size_t prefix = message.find("parse error");
  if (prefix != std::string_view::npos) {
    const size_t colon = message.find(": ", prefix);
    if (colon != std::string_view::npos) message.remove_prefix(colon + 2);
  }
  return std::string(message);
}

ordered number_json(double value) {
  if (value == std::floor(value) && std::abs(value) < 9e15) return static_cast<int64_t>(value);
  return value;
}

// Zero and fixed amounts as bare numbers, the rest as objects with the non-zero terms.
ordered polynomial_json(const ShapePolynomial& p) {
  if (p.per_sample == 0 && p.per_token == 0 && p.per_token_seq == 0) return number_json(p.fixed);
  ordered out = ordered::object();
  if (p.fixed != 0) out["fixed"] = number_json(p.fixed);
  if (p.per_sample != 0) out["per_sample"] = number_json(p.per_sample);
  if (p.per_token != 0) out["per_token"] = number_json(p.per_token);
  if (p.per_token_seq != 0) out["per_token_seq"] = number_json(p.per_token_seq);
  return out;
}

ordered pass_json(const PassCost& pass) {
  ordered out;
  out["time"] = number_json(pass.time);
  out["flops"] = polynomial_json(pass.flops);
  out["bytes"] = polynomial_json(pass.bytes);
  return out;
}

ordered node_json(const CostGraph& graph, const OperatorNode& node) {
  ordered out;
  out["name"] = node.name;
  if (!node.kind.empty()) out["kind"] = node.kind;
  if (node.layer != kNoLayer) out["layer"] = graph.layers[node.layer].name;
  out["parameters"] = number_json(node.parameters);
  if (node.active_parameters != node.parameters) out["active_parameters"] = number_json(node.active_parameters);
  if (node.tied_to != kNotTied) out["tied_to"] = graph.nodes[node.tied_to].name;
  if (node.scaling.rule == ScalingRule::Roofline) {
    out["scaling"] = {{"rule", "roofline"}};
  } else {
    out["scaling"] = {{"rule", "power"},
                      {"batch_exponent", number_json(node.scaling.batch_exponent)},
                      {"sequence_exponent", number_json(node.scaling.sequence_exponent)}};
  }
  out["forward"] = pass_json(node.forward);
  out["backward_input"] = pass_json(node.backward_input);
  out["backward_weight"] = pass_json(node.backward_weight);
  out["saved_bytes"] = polynomial_json(node.saved_bytes);
  out["freed_by_input"] = polynomial_json(node.freed_by_input);
  out["output_bytes"] = polynomial_json(node.output_bytes);
  if (!node.workspace_bytes.is_zero()) out["workspace_bytes"] = polynomial_json(node.workspace_bytes);
  return out;
}

}  // namespace

CostGraph parse_cost_graph(const std::string& text, const std::string& origin) {
  json document;
  try {
    document = json::parse(text);
  } catch (const json::parse_error& error) {
    const auto [line, column] = line_and_column(text, error.byte);
    throw Error(located(origin, line, column, fmt::format("invalid JSON: {}", syntax_message(error))));
  }
  CostGraph graph = Reader(origin).graph(document);
  validate_cost_graph(graph, origin);
  return graph;
}

CostGraph load_cost_graph(const std::string& path) { return parse_cost_graph(read_text_file(path), path); }

std::string cost_graph_to_json(const CostGraph& graph) {
  ordered out;
  out["format"] = kFormat;
  out["version"] = kVersion;
  out["name"] = graph.name;
  out["time_unit"] = graph.time_unit;
  out["reference"] = {{"microbatch_size", number_json(graph.reference.microbatch_size)},
                      {"seq_len", number_json(graph.reference.seq_len)}};
  if (graph.hardware)
    out["hardware"] = {{"name", graph.hardware->name},
                       {"flop_rate", number_json(graph.hardware->flop_rate)},
                       {"byte_rate", number_json(graph.hardware->byte_rate)}};
  out["layers"] = ordered::array();
  for (const LayerInfo& layer : graph.layers)
    out["layers"].push_back({{"name", layer.name}, {"role", layer_role_name(layer.role)}});
  out["nodes"] = ordered::array();
  for (const OperatorNode& node : graph.nodes) out["nodes"].push_back(node_json(graph, node));
  out["edges"] = ordered::array();
  for (const TensorEdge& edge : graph.edges)
    out["edges"].push_back({{"from", graph.nodes[edge.from].name},
                            {"to", graph.nodes[edge.to].name},
                            {"bytes", polynomial_json(edge.bytes)}});
  return out.dump(1) + "\n";
}

}  // namespace flexpipe
