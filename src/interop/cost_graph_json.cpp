// The cost graph's JSON file format (docs/cost-graph.md): strict reading, every error naming the file
// and the JSON path of the bad field, and a writer whose output reads back equal.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "json_reader.h"

namespace flexpipe {

namespace {

using detail::describe_json;
using detail::json_child;
using detail::json_element;
using nlohmann::json;
using ordered = nlohmann::ordered_json;

constexpr std::string_view kFormat = "flexpipe-cost-graph";
constexpr int kVersion = 1;

constexpr std::string_view kTopLevelKeys[] = {"format",   "version", "name",  "time_unit", "reference",
                                              "hardware", "layers",  "nodes", "edges",     "capture"};
constexpr std::string_view kCaptureKeys[] = {"file",   "factory", "inputs", "loss",  "threads",
                                             "warmup", "repeats", "clock",  "torch", "kept_whole"};
constexpr std::string_view kCapturedInputKeys[] = {"shape", "dtype"};
constexpr std::string_view kKeptWholeKeys[] = {"module", "reason"};
constexpr std::string_view kReferenceKeys[] = {"microbatch_size", "seq_len"};
constexpr std::string_view kHardwareKeys[] = {"name", "flop_rate", "byte_rate"};
constexpr std::string_view kLayerKeys[] = {"name", "role"};
constexpr std::string_view kNodeKeys[] = {"name",
                                          "kind",
                                          "layer",
                                          "parameters",
                                          "active_parameters",
                                          "tied_to",
                                          "scaling",
                                          "forward",
                                          "backward_input",
                                          "backward_weight",
                                          "saved_bytes",
                                          "freed_by_input",
                                          "shared_saved_bytes",
                                          "output_bytes",
                                          "workspace_bytes",
                                          "note"};
constexpr std::string_view kPassKeys[] = {"time", "flops", "bytes"};
constexpr std::string_view kPolynomialKeys[] = {"fixed", "per_sample", "per_token", "per_token_seq"};
constexpr std::string_view kScalingKeys[] = {"rule", "batch_exponent", "sequence_exponent"};
constexpr std::string_view kEdgeKeys[] = {"from", "to", "bytes"};
constexpr std::pair<std::string_view, LayerRole> kRoles[] = {{"embedding", LayerRole::Embedding},
                                                             {"transformer", LayerRole::Transformer},
                                                             {"mtp", LayerRole::Mtp},
                                                             {"loss", LayerRole::Loss},
                                                             {"other", LayerRole::Other}};

class Reader : public detail::JsonPathReader {
 public:
  explicit Reader(const std::string& origin) : JsonPathReader(origin) {}

  CostGraph graph(const json& document) {
    if (!document.is_object())
      fail("", fmt::format("expected a JSON object at the top level, got {}", describe_json(document)));
    only_known_keys(document, "", kTopLevelKeys);
    check_format_header(document, "cost graph", kFormat, kVersion);

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
        if (!hardware.contains(key)) fail(json_child("hardware", key), "missing");
      rates.flop_rate = positive(hardware["flop_rate"], "hardware.flop_rate");
      rates.byte_rate = positive(hardware["byte_rate"], "hardware.byte_rate");
      result.hardware = rates;
    }
    if (document.contains("layers")) read_layers(document["layers"], result);
    if (!document.contains("nodes")) fail("nodes", "missing (a cost graph lists its operators)");
    read_nodes(document["nodes"], result);
    if (document.contains("edges")) read_edges(document["edges"], result);
    if (document.contains("capture")) result.capture = capture(document["capture"]);
    return result;
  }

 private:
  // Reads each listed key that `object` has into its field with `read_value`; absent keys keep the
  // field's default. Keys are read in list order, so the first bad one is the one reported.
  template <typename Field, typename Owner>
  void read_present(const json& object, const std::string& path,
                    std::initializer_list<std::pair<const char*, std::type_identity_t<Field>*>> fields,
                    Field (Owner::*read_value)(const json&, const std::string&) const) const {
    for (const auto& [key, field] : fields)
      if (object.contains(key)) *field = (this->*read_value)(object[key], json_child(path, key));
  }

  double positive(const json& value, const std::string& path) const {
    const double result = number(value, path);
    if (result == 0) fail(path, "must be positive, got 0");
    return result;
  }

  const json& array(const json& value, const std::string& path) const {
    if (!value.is_array()) fail(path, fmt::format("expected an array, got {}", describe_json(value)));
    return value;
  }

  // A bare number is a fixed amount; an object spells the terms.
  ShapePolynomial polynomial(const json& value, const std::string& path) const {
    if (value.is_number()) return fixed_amount(number(value, path));
    if (!value.is_object())
      fail(path, fmt::format("expected a number or an object of shape terms, got {}", describe_json(value)));
    only_known_keys(value, path, kPolynomialKeys);
    ShapePolynomial result;
    read_present(value, path,
                 {{"fixed", &result.fixed},
                  {"per_sample", &result.per_sample},
                  {"per_token", &result.per_token},
                  {"per_token_seq", &result.per_token_seq}},
                 &Reader::number);
    return result;
  }

  PassCost pass(const json& value, const std::string& path) const {
    require_object(value, path);
    only_known_keys(value, path, kPassKeys);
    PassCost result;
    if (value.contains("time")) result.time = number(value["time"], json_child(path, "time"));
    if (value.contains("flops")) result.flops = polynomial(value["flops"], json_child(path, "flops"));
    if (value.contains("bytes")) result.bytes = polynomial(value["bytes"], json_child(path, "bytes"));
    return result;
  }

  Scaling scaling(const json& value, const std::string& path) const {
    require_object(value, path);
    only_known_keys(value, path, kScalingKeys);
    if (!value.contains("rule")) fail(json_child(path, "rule"), "missing (\"roofline\" or \"power\")");
    const std::string rule = text(value["rule"], json_child(path, "rule"));
    Scaling result;
    if (rule == "roofline") {
      result.rule = ScalingRule::Roofline;
      for (const char* key : {"batch_exponent", "sequence_exponent"})
        if (value.contains(key)) fail(json_child(path, key), "only goes with \"rule\": \"power\"");
    } else if (rule == "power") {
      result.rule = ScalingRule::Power;
      if (value.contains("batch_exponent"))
        result.batch_exponent = number(value["batch_exponent"], json_child(path, "batch_exponent"));
      if (value.contains("sequence_exponent"))
        result.sequence_exponent = number(value["sequence_exponent"], json_child(path, "sequence_exponent"));
    } else {
      fail(json_child(path, "rule"), fmt::format("expected \"roofline\" or \"power\", got {}", value["rule"].dump()));
    }
    return result;
  }

  void read_layers(const json& layers, CostGraph& result) {
    array(layers, "layers");
    for (size_t i = 0; i < layers.size(); ++i) {
      const std::string path = json_element("layers", i);
      const json& entry = layers[i];
      require_object(entry, path);
      only_known_keys(entry, path, kLayerKeys);
      if (!entry.contains("name")) fail(json_child(path, "name"), "missing");
      LayerInfo layer;
      layer.name = text(entry["name"], json_child(path, "name"));
      if (entry.contains("role")) {
        const std::string role = text(entry["role"], json_child(path, "role"));
        const auto* found =
            std::find_if(std::begin(kRoles), std::end(kRoles), [&](const auto& r) { return r.first == role; });
        if (found == std::end(kRoles))
          fail(json_child(path, "role"),
               fmt::format("expected one of embedding, transformer, mtp, loss, other; got {}", entry["role"].dump()));
        layer.role = found->second;
      }
      if (!layer_index_.emplace(layer.name, static_cast<int>(i)).second)
        fail(json_child(path, "name"), fmt::format("layer '{}' is defined twice", layer.name));
      result.layers.push_back(layer);
    }
  }

  void read_nodes(const json& nodes, CostGraph& result) {
    array(nodes, "nodes");
    // Names first, so that tied_to may point at any node and the error for a missing one is exact.
    for (size_t i = 0; i < nodes.size(); ++i) {
      const std::string path = json_element("nodes", i);
      require_object(nodes[i], path);
      if (!nodes[i].contains("name")) fail(json_child(path, "name"), "missing");
      const std::string name = text(nodes[i]["name"], json_child(path, "name"));
      if (auto [it, inserted] = node_index_.emplace(name, static_cast<int>(i)); !inserted)
        fail(json_child(path, "name"), fmt::format("'{}' is already the name of nodes[{}]", name, it->second));
    }
    for (size_t i = 0; i < nodes.size(); ++i) result.nodes.push_back(node(nodes[i], json_element("nodes", i)));
  }

  OperatorNode node(const json& entry, const std::string& path) const {
    only_known_keys(entry, path, kNodeKeys);
    OperatorNode result;
    result.name = entry["name"].get<std::string>();
    if (entry.contains("kind")) result.kind = text(entry["kind"], json_child(path, "kind"));
    if (entry.contains("layer")) {
      const std::string layer = text(entry["layer"], json_child(path, "layer"));
      const auto found = layer_index_.find(layer);
      if (found == layer_index_.end())
        fail(json_child(path, "layer"), fmt::format("unknown layer '{}' (define it in \"layers\")", layer));
      result.layer = found->second;
    }
    if (entry.contains("parameters")) result.parameters = number(entry["parameters"], json_child(path, "parameters"));
    result.active_parameters = result.parameters;
    if (entry.contains("active_parameters"))
      result.active_parameters = number(entry["active_parameters"], json_child(path, "active_parameters"));
    if (entry.contains("tied_to")) {
      const std::string owner = text(entry["tied_to"], json_child(path, "tied_to"));
      const auto found = node_index_.find(owner);
      if (found == node_index_.end()) fail(json_child(path, "tied_to"), fmt::format("unknown node '{}'", owner));
      result.tied_to = found->second;
    }
    if (entry.contains("scaling")) result.scaling = scaling(entry["scaling"], json_child(path, "scaling"));
    read_present(entry, path,
                 {{"forward", &result.forward},
                  {"backward_input", &result.backward_input},
                  {"backward_weight", &result.backward_weight}},
                 &Reader::pass);
    read_present(entry, path,
                 {{"saved_bytes", &result.saved_bytes},
                  {"freed_by_input", &result.freed_by_input},
                  {"shared_saved_bytes", &result.shared_saved_bytes},
                  {"output_bytes", &result.output_bytes},
                  {"workspace_bytes", &result.workspace_bytes}},
                 &Reader::polynomial);
    if (entry.contains("note")) result.note = text(entry["note"], json_child(path, "note"));
    return result;
  }

  // A count that fits an int: threads and runs per measurement.
  int small_count(const json& value, const std::string& path) const {
    const double result = number(value, path);
    if (result != std::floor(result) || result > 1e9)
      fail(path, fmt::format("expected a whole number up to 10^9, got {}", describe_json(value)));
    return static_cast<int>(result);
  }

  CaptureRecord capture(const json& value) const {
    require_object(value, "capture");
    only_known_keys(value, "capture", kCaptureKeys);
    CaptureRecord result;
    read_present(value, "capture",
                 {{"file", &result.file},
                  {"factory", &result.factory},
                  {"loss", &result.loss},
                  {"clock", &result.clock},
                  {"torch", &result.torch_version}},
                 &Reader::text);
    read_present(value, "capture",
                 {{"threads", &result.threads}, {"warmup", &result.warmup}, {"repeats", &result.repeats}},
                 &Reader::small_count);
    if (value.contains("inputs")) {
      const json& inputs = array(value["inputs"], "capture.inputs");
      for (size_t i = 0; i < inputs.size(); ++i) {
        const std::string path = json_element("capture.inputs", i);
        require_object(inputs[i], path);
        only_known_keys(inputs[i], path, kCapturedInputKeys);
        CapturedInput input;
        if (inputs[i].contains("dtype")) input.dtype = text(inputs[i]["dtype"], json_child(path, "dtype"));
        if (!inputs[i].contains("shape")) fail(json_child(path, "shape"), "missing");
        const json& shape = array(inputs[i]["shape"], json_child(path, "shape"));
        for (size_t d = 0; d < shape.size(); ++d) {
          const std::string dimension = json_element(json_child(path, "shape"), d);
          const int extent = small_count(shape[d], dimension);
          if (extent == 0) fail(dimension, "must be positive, got 0");
          input.shape.push_back(extent);
        }
        result.inputs.push_back(std::move(input));
      }
    }
    if (value.contains("kept_whole")) {
      const json& kept = array(value["kept_whole"], "capture.kept_whole");
      for (size_t i = 0; i < kept.size(); ++i) {
        const std::string path = json_element("capture.kept_whole", i);
        require_object(kept[i], path);
        only_known_keys(kept[i], path, kKeptWholeKeys);
        KeptWholeModule module;
        read_present(kept[i], path, {{"module", &module.module}, {"reason", &module.reason}}, &Reader::text);
        result.kept_whole.push_back(std::move(module));
      }
    }
    return result;
  }

  void read_edges(const json& edges, CostGraph& result) const {
    array(edges, "edges");
    for (size_t i = 0; i < edges.size(); ++i) {
      const std::string path = json_element("edges", i);
      const json& entry = edges[i];
      require_object(entry, path);
      only_known_keys(entry, path, kEdgeKeys);
      TensorEdge edge;
      edge.from = endpoint(entry, path, "from");
      edge.to = endpoint(entry, path, "to");
      if (entry.contains("bytes")) edge.bytes = polynomial(entry["bytes"], json_child(path, "bytes"));
      result.edges.push_back(edge);
    }
  }

  int endpoint(const json& entry, const std::string& path, const char* key) const {
    if (!entry.contains(key)) fail(json_child(path, key), "missing (an edge names its \"from\" and \"to\" nodes)");
    const std::string name = text(entry[key], json_child(path, key));
    const auto found = node_index_.find(name);
    if (found == node_index_.end()) fail(json_child(path, key), fmt::format("unknown node '{}' (dangling edge)", name));
    return found->second;
  }

  std::unordered_map<std::string, int> layer_index_;
  std::unordered_map<std::string, int> node_index_;
};

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
  if (!node.shared_saved_bytes.is_zero()) out["shared_saved_bytes"] = polynomial_json(node.shared_saved_bytes);
  out["output_bytes"] = polynomial_json(node.output_bytes);
  if (!node.workspace_bytes.is_zero()) out["workspace_bytes"] = polynomial_json(node.workspace_bytes);
  if (!node.note.empty()) out["note"] = node.note;
  return out;
}

ordered capture_json(const CaptureRecord& capture) {
  ordered out = ordered::object();
  if (!capture.file.empty()) out["file"] = capture.file;
  if (!capture.factory.empty()) out["factory"] = capture.factory;
  out["inputs"] = ordered::array();
  for (const CapturedInput& input : capture.inputs) {
    ordered entry = {{"shape", input.shape}};
    if (!input.dtype.empty()) entry["dtype"] = input.dtype;
    out["inputs"].push_back(entry);
  }
  if (!capture.loss.empty()) out["loss"] = capture.loss;
  out["threads"] = capture.threads;
  out["warmup"] = capture.warmup;
  out["repeats"] = capture.repeats;
  if (!capture.clock.empty()) out["clock"] = capture.clock;
  if (!capture.torch_version.empty()) out["torch"] = capture.torch_version;
  if (!capture.kept_whole.empty()) {
    out["kept_whole"] = ordered::array();
    for (const KeptWholeModule& kept : capture.kept_whole)
      out["kept_whole"].push_back({{"module", kept.module}, {"reason", kept.reason}});
  }
  return out;
}

}  // namespace

CostGraph parse_cost_graph(const std::string& text, const std::string& origin) {
  const json document = detail::parse_json_text(text, origin, "invalid JSON", detail::ColumnUnit::Byte);
  CostGraph graph = Reader(origin).graph(document);
  validate_cost_graph(graph, origin);
  return graph;
}

CostGraph load_cost_graph(const std::string& path) { return parse_cost_graph(read_text_file(path), path); }

std::string cost_graph_to_json(const CostGraph& graph) {
  ordered out = detail::format_header<ordered>(kFormat, kVersion);
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
  if (graph.capture) out["capture"] = capture_json(*graph.capture);
  return out.dump(1) + "\n";
}

}  // namespace flexpipe
