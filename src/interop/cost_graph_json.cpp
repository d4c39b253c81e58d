// The cost graph's JSON file format (docs/cost-graph.md): strict reading, every error naming the file
// and the JSON path of the bad field, and a writer whose output reads back equal.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/support/quantity.h"
#include "json_quantity.h"
#include "json_reader.h"
#include "link_json.h"

namespace flexpipe {

namespace {

using interop::describe_json;
using interop::json_child;
using interop::json_element;
using interop::number_json;
using nlohmann::json;
using ordered = nlohmann::ordered_json;

constexpr std::string_view kFormat = "flexpipe-cost-graph";
constexpr int kVersion = 1;

constexpr std::string_view kTopLevelKeys[] = {"format", "version", "name",  "time_unit", "reference", "hardware",
                                              "link",   "layers",  "nodes", "edges",     "capture"};
constexpr std::string_view kCaptureKeys[] = {"file",    "factory", "inputs", "loss",   "threads", "warmup",
                                             "repeats", "clock",   "torch",  "tracer", "dtype",   "kept_whole"};
constexpr std::string_view kCapturedInputKeys[] = {"shape", "dtype", "name"};
constexpr std::string_view kKeptWholeKeys[] = {"module", "reason"};
constexpr std::string_view kReferenceKeys[] = {"microbatch_size", "seq_len"};
constexpr std::string_view kHardwareKeys[] = {"name", "flop_rate", "byte_rate"};
constexpr std::string_view kLayerKeys[] = {"name", "role"};
constexpr std::string_view kNodeKeys[] = {"name",
                                          "kind",
                                          "role",
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
                                          "unscaled_saved_bytes",
                                          "saved_output_bytes",
                                          "output_bytes",
                                          "workspace_bytes",
                                          "buffers",
                                          "note"};
constexpr std::string_view kBufferKeys[] = {"name", "bytes", "unscaled"};
constexpr std::string_view kPassKeys[] = {"time", "flops", "bytes"};
constexpr std::string_view kPolynomialKeys[] = {"fixed", "per_sample", "per_token", "per_token_seq"};
constexpr std::string_view kScalingKeys[] = {"rule", "batch_exponent", "sequence_exponent"};
constexpr std::string_view kEdgeKeys[] = {"from", "to", "bytes", "saved_bytes", "unscaled"};
constexpr std::pair<std::string_view, LayerRole> kRoles[] = {{"embedding", LayerRole::Embedding},
                                                             {"transformer", LayerRole::Transformer},
                                                             {"mtp", LayerRole::Mtp},
                                                             {"loss", LayerRole::Loss},
                                                             {"other", LayerRole::Other}};

// What a node or an edge names that the reader can only look up once the whole document is read:
// a streamed element may come before the layers it names or the node it is tied to.
struct NodeReferences {
  std::optional<std::string> layer, tied_to;
};
struct EdgeReferences {
  std::string from, to;
};

// The elements of "nodes" and "edges", read as the parser completed each (read_streaming), in order.
struct StreamedElements {
  std::vector<OperatorNode> nodes;
  std::vector<NodeReferences> node_references;
  std::vector<TensorEdge> edges;
  std::vector<EdgeReferences> edge_references;
};

// A JSON path spelled out only when a message needs it: a large graph has millions of fields, and
// formatting each one's path took longer than reading it.
class LazyPath {
 public:
  explicit LazyPath(const std::string& root) : root_(&root) {}
  LazyPath(const LazyPath& parent, std::string_view key) : parent_(&parent), key_(key) {}
  std::string str() const { return parent_ ? json_child(parent_->str(), key_) : *root_; }

 private:
  const LazyPath* parent_ = nullptr;
  const std::string* root_ = nullptr;
  std::string_view key_;
};

class Reader : public interop::JsonPathReader {
 public:
  explicit Reader(const std::string& origin) : JsonPathReader(origin) {}

  // `streamed`: the nodes and edges read while parsing (then the document's arrays are empty);
  // null: they are read from the document.
  CostGraph graph(const json& document, StreamedElements* streamed = nullptr) {
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
      // Bytes per time unit; a datasheet's "3.35TB/s" is converted into it.
      rates.byte_rate = hardware["byte_rate"].is_string()
                            ? interop::quantity_in_declared_units(*this, hardware["byte_rate"], "hardware.byte_rate",
                                                                  QuantityKind::Bandwidth, {result.time_unit, "bytes"})
                            : number(hardware["byte_rate"], "hardware.byte_rate");
      if (rates.byte_rate == 0) fail("hardware.byte_rate", "must be positive, got 0");
      result.hardware = rates;
    }
    if (document.contains("link")) {
      const json& link = document["link"];
      require_object(link, "link");
      only_known_keys(link, "link", interop::kLinkKeys);
      result.link = interop::read_link_fields(*this, link, "link", Link{}, {result.time_unit, "bytes"});
    }
    if (document.contains("layers")) read_layers(document["layers"], result);
    if (!document.contains("nodes")) fail("nodes", "missing (a cost graph lists its operators)");
    if (streamed)
      adopt_nodes(*streamed, result);
    else
      read_nodes(document["nodes"], result);
    if (streamed)
      adopt_edges(*streamed, result);
    else if (document.contains("edges"))
      read_edges(document["edges"], result);
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

  // The fast forms of the checks below: the same answers, and the path spelled out only to fail.
  double number_at(const json& value, const LazyPath& path) const {
    if (value.is_number()) {
      const double result = value.get<double>();
      if (result >= 0 && result <= interop::kLargestNumber) return result;
    }
    return number(value, path.str());
  }
  std::string text_at(const json& value, const LazyPath& path) const {
    if (value.is_string()) return value.get<std::string>();
    return text(value, path.str());
  }
  void require_object_at(const json& value, const LazyPath& path) const {
    if (!value.is_object()) require_object(value, path.str());
  }
  void only_known_keys_at(const json& object, const LazyPath& path, std::span<const std::string_view> known) const {
    for (const auto& [key, value] : object.items())
      if (std::find(known.begin(), known.end(), key) == known.end()) only_known_keys(object, path.str(), known);
  }

  // What a polynomial counts: bytes may also be written with a size unit ("1.5GiB"), FLOPs may not.
  enum class Amount { Count, Bytes };

  double amount_at(const json& value, const LazyPath& path, Amount amount) const {
    // A graph counts memory in bytes whatever its time unit, so a size always converts.
    if (amount == Amount::Bytes && value.is_string())
      return interop::quantity_in_declared_units(*this, value, path.str(), QuantityKind::Size, {"unit", "bytes"});
    return number_at(value, path);
  }

  // A bare number (or, for bytes, a size) is a fixed amount; an object spells the terms.
  ShapePolynomial polynomial(const json& value, const LazyPath& path, Amount amount) const {
    if (value.is_number() || (amount == Amount::Bytes && value.is_string()))
      return fixed_amount(amount_at(value, path, amount));
    if (!value.is_object())
      fail(path.str(), fmt::format("expected a number or an object of shape terms, got {}", describe_json(value)));
    only_known_keys_at(value, path, kPolynomialKeys);
    ShapePolynomial result;
    for (const auto& [key, field] : {std::pair{"fixed", &result.fixed},
                                     {"per_sample", &result.per_sample},
                                     {"per_token", &result.per_token},
                                     {"per_token_seq", &result.per_token_seq}})
      if (const auto it = value.find(key); it != value.end()) *field = amount_at(*it, LazyPath(path, key), amount);
    return result;
  }

  PassCost pass(const json& value, const LazyPath& path) const {
    require_object_at(value, path);
    only_known_keys_at(value, path, kPassKeys);
    PassCost result;
    if (const auto it = value.find("time"); it != value.end()) result.time = number_at(*it, LazyPath(path, "time"));
    if (const auto it = value.find("flops"); it != value.end())
      result.flops = polynomial(*it, LazyPath(path, "flops"), Amount::Count);
    if (const auto it = value.find("bytes"); it != value.end())
      result.bytes = polynomial(*it, LazyPath(path, "bytes"), Amount::Bytes);
    return result;
  }

  Scaling scaling(const json& value, const LazyPath& lazy_path) const {
    require_object_at(value, lazy_path);
    only_known_keys_at(value, lazy_path, kScalingKeys);
    // The roofline rule (every zoo and captured node) reads fast; anything else spells its path.
    if (value.size() == 1 && value.contains("rule") && value["rule"].is_string() &&
        value["rule"].get_ref<const std::string&>() == "roofline")
      return Scaling{};
    const std::string path = lazy_path.str();
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
    node_index_.reserve(nodes.size());
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

  // The streaming reader's steps (read_streaming) are read_nodes' and read_edges' per element.
 public:
  // `later`: where the layer and tied_to names go when they are looked up after the whole document
  // (a streamed node); null: looked up here.
  OperatorNode node(const json& entry, const std::string& path_text, NodeReferences* later = nullptr) const {
    const LazyPath path(path_text);
    only_known_keys_at(entry, path, kNodeKeys);
    OperatorNode result;
    result.name = entry["name"].get<std::string>();
    if (const auto it = entry.find("kind"); it != entry.end()) result.kind = text_at(*it, LazyPath(path, "kind"));
    if (const auto it = entry.find("role"); it != entry.end()) result.role = text_at(*it, LazyPath(path, "role"));
    if (const auto it = entry.find("layer"); it != entry.end()) {
      std::string layer = text_at(*it, LazyPath(path, "layer"));
      if (later)
        later->layer = std::move(layer);
      else
        result.layer = layer_named(layer, path_text);
    }
    if (const auto it = entry.find("parameters"); it != entry.end())
      result.parameters = number_at(*it, LazyPath(path, "parameters"));
    result.active_parameters = result.parameters;
    if (const auto it = entry.find("active_parameters"); it != entry.end())
      result.active_parameters = number_at(*it, LazyPath(path, "active_parameters"));
    if (const auto it = entry.find("tied_to"); it != entry.end()) {
      std::string owner = text_at(*it, LazyPath(path, "tied_to"));
      if (later)
        later->tied_to = std::move(owner);
      else
        result.tied_to = owner_named(owner, path_text);
    }
    if (const auto it = entry.find("scaling"); it != entry.end())
      result.scaling = scaling(*it, LazyPath(path, "scaling"));
    for (const auto& [key, field] : {std::pair{"forward", &result.forward},
                                     {"backward_input", &result.backward_input},
                                     {"backward_weight", &result.backward_weight}})
      if (const auto it = entry.find(key); it != entry.end()) *field = pass(*it, LazyPath(path, key));
    for (const auto& [key, field] : {std::pair{"saved_bytes", &result.saved_bytes},
                                     {"freed_by_input", &result.freed_by_input},
                                     {"shared_saved_bytes", &result.shared_saved_bytes},
                                     {"unscaled_saved_bytes", &result.unscaled_saved_bytes},
                                     {"saved_output_bytes", &result.saved_output_bytes},
                                     {"output_bytes", &result.output_bytes},
                                     {"workspace_bytes", &result.workspace_bytes}})
      if (const auto it = entry.find(key); it != entry.end())
        *field = polynomial(*it, LazyPath(path, key), Amount::Bytes);
    if (const auto it = entry.find("buffers"); it != entry.end()) {
      const std::string list = LazyPath(path, "buffers").str();
      const json& buffers = array(*it, list);
      for (size_t i = 0; i < buffers.size(); ++i) {
        const std::string at = json_element(list, i);
        require_object(buffers[i], at);
        only_known_keys(buffers[i], at, kBufferKeys);
        BufferUse buffer;
        if (!buffers[i].contains("name")) fail(at, "a buffer needs a name");
        buffer.name = text(buffers[i]["name"], json_child(at, "name"));
        if (!buffers[i].contains("bytes")) fail(at, "a buffer needs its bytes");
        const LazyPath at_path(at);
        buffer.bytes = amount_at(buffers[i]["bytes"], LazyPath(at_path, "bytes"), Amount::Bytes);
        if (const auto flag = buffers[i].find("unscaled"); flag != buffers[i].end()) {
          if (!flag->is_boolean())
            fail(json_child(at, "unscaled"), "expected true or false, got " + describe_json(*flag));
          buffer.unscaled = flag->get<bool>();
        }
        for (const BufferUse& other : result.buffers)
          if (other.name == buffer.name)
            fail(json_child(at, "name"), fmt::format("buffer '{}' is listed twice for this operator", buffer.name));
        result.buffers.push_back(std::move(buffer));
      }
    }
    if (const auto it = entry.find("note"); it != entry.end()) result.note = text_at(*it, LazyPath(path, "note"));
    return result;
  }

 private:
  int layer_named(const std::string& layer, const std::string& path) const {
    const auto found = layer_index_.find(layer);
    if (found == layer_index_.end())
      fail(json_child(path, "layer"), fmt::format("unknown layer '{}' (define it in \"layers\")", layer));
    return found->second;
  }

  int owner_named(const std::string& owner, const std::string& path) const {
    const auto found = node_index_.find(owner);
    if (found == node_index_.end()) fail(json_child(path, "tied_to"), fmt::format("unknown node '{}'", owner));
    return found->second;
  }

  // The streamed nodes, checked as read_nodes checks them: names first, then what each names.
  void adopt_nodes(StreamedElements& streamed, CostGraph& result) {
    node_index_.reserve(streamed.nodes.size());
    for (size_t i = 0; i < streamed.nodes.size(); ++i)
      if (auto [it, inserted] = node_index_.emplace(streamed.nodes[i].name, static_cast<int>(i)); !inserted)
        fail(json_child(json_element("nodes", i), "name"),
             fmt::format("'{}' is already the name of nodes[{}]", streamed.nodes[i].name, it->second));
    for (size_t i = 0; i < streamed.nodes.size(); ++i) {
      const NodeReferences& names = streamed.node_references[i];
      if (names.layer) streamed.nodes[i].layer = layer_named(*names.layer, json_element("nodes", i));
      if (names.tied_to) streamed.nodes[i].tied_to = owner_named(*names.tied_to, json_element("nodes", i));
    }
    result.nodes = std::move(streamed.nodes);
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
                  {"torch", &result.torch_version},
                  {"tracer", &result.tracer},
                  {"dtype", &result.dtype}},
                 &Reader::text);
    read_present(value, "capture",
                 {{"threads", &result.threads}, {"warmup", &result.warmup}, {"repeats", &result.repeats}},
                 &Reader::count);
    if (!result.tracer.empty() && result.tracer != "fx" && result.tracer != "export")
      fail("capture.tracer", fmt::format("'{}' is not a tracer: fx or export", result.tracer));
    if (!result.dtype.empty() && result.dtype != "float32" && result.dtype != "float64" && result.dtype != "float16" &&
        result.dtype != "bfloat16")
      fail("capture.dtype",
           fmt::format("'{}' is not a floating type: float32, float64, float16 or bfloat16", result.dtype));
    if (value.contains("inputs")) {
      const json& inputs = array(value["inputs"], "capture.inputs");
      for (size_t i = 0; i < inputs.size(); ++i) {
        const std::string path = json_element("capture.inputs", i);
        require_object(inputs[i], path);
        only_known_keys(inputs[i], path, kCapturedInputKeys);
        CapturedInput input;
        if (inputs[i].contains("dtype")) input.dtype = text(inputs[i]["dtype"], json_child(path, "dtype"));
        if (inputs[i].contains("name")) {
          input.name = text(inputs[i]["name"], json_child(path, "name"));
          for (size_t j = 0; j < result.inputs.size(); ++j)
            if (result.inputs[j].name == input.name)
              fail(json_child(path, "name"),
                   fmt::format("'{}' is already the name of capture.inputs[{}]", input.name, j));
        }
        if (!inputs[i].contains("shape")) fail(json_child(path, "shape"), "missing");
        const json& shape = array(inputs[i]["shape"], json_child(path, "shape"));
        for (size_t d = 0; d < shape.size(); ++d) {
          const std::string dimension = json_element(json_child(path, "shape"), d);
          const int extent = count(shape[d], dimension);
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
    for (size_t i = 0; i < edges.size(); ++i) result.edges.push_back(edge(edges[i], json_element("edges", i)));
  }

 public:
  // `later`: where the endpoint names go when they are looked up after the whole document (a
  // streamed edge); null: looked up here.
  TensorEdge edge(const json& entry, const std::string& path, EdgeReferences* later = nullptr) const {
    require_object(entry, path);
    only_known_keys_at(entry, LazyPath(path), kEdgeKeys);
    TensorEdge edge;
    if (later) {
      later->from = endpoint_name(entry, path, "from");
      later->to = endpoint_name(entry, path, "to");
    } else {
      edge.from = endpoint(entry, path, "from");
      edge.to = endpoint(entry, path, "to");
    }
    const LazyPath at(path);
    if (const auto it = entry.find("bytes"); it != entry.end())
      edge.bytes = polynomial(*it, LazyPath(at, "bytes"), Amount::Bytes);
    if (const auto it = entry.find("saved_bytes"); it != entry.end())
      edge.saved_bytes = polynomial(*it, LazyPath(at, "saved_bytes"), Amount::Bytes);
    if (const auto flag = entry.find("unscaled"); flag != entry.end()) {
      if (!flag->is_boolean())
        fail(json_child(path, "unscaled"), "expected true or false, got " + describe_json(*flag));
      edge.unscaled = flag->get<bool>();
    }
    return edge;
  }

 private:
  void adopt_edges(StreamedElements& streamed, CostGraph& result) const {
    for (size_t i = 0; i < streamed.edges.size(); ++i) {
      const std::string path = json_element("edges", i);
      streamed.edges[i].from = node_named(streamed.edge_references[i].from, path, "from");
      streamed.edges[i].to = node_named(streamed.edge_references[i].to, path, "to");
    }
    result.edges = std::move(streamed.edges);
  }

  std::string endpoint_name(const json& entry, const std::string& path, const char* key) const {
    const auto it = entry.find(key);
    if (it == entry.end()) fail(json_child(path, key), "missing (an edge names its \"from\" and \"to\" nodes)");
    const LazyPath at(path);
    return text_at(*it, LazyPath(at, key));
  }

  int endpoint(const json& entry, const std::string& path, const char* key) const {
    return node_named(endpoint_name(entry, path, key), path, key);
  }

  int node_named(const std::string& name, const std::string& path, const char* key) const {
    const auto found = node_index_.find(name);
    if (found == node_index_.end()) fail(json_child(path, key), fmt::format("unknown node '{}' (dangling edge)", name));
    return found->second;
  }

  std::unordered_map<std::string, int> layer_index_;
  std::unordered_map<std::string, int> node_index_;
};

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
  if (!node.role.empty()) out["role"] = node.role;
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
  if (!node.unscaled_saved_bytes.is_zero()) out["unscaled_saved_bytes"] = polynomial_json(node.unscaled_saved_bytes);
  if (!node.saved_output_bytes.is_zero()) out["saved_output_bytes"] = polynomial_json(node.saved_output_bytes);
  out["output_bytes"] = polynomial_json(node.output_bytes);
  if (!node.workspace_bytes.is_zero()) out["workspace_bytes"] = polynomial_json(node.workspace_bytes);
  if (!node.buffers.empty()) {
    out["buffers"] = ordered::array();
    for (const BufferUse& buffer : node.buffers) {
      ordered entry = {{"name", buffer.name}, {"bytes", number_json(buffer.bytes)}};
      if (buffer.unscaled) entry["unscaled"] = true;
      out["buffers"].push_back(entry);
    }
  }
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
    if (!input.name.empty()) entry["name"] = input.name;
    out["inputs"].push_back(entry);
  }
  if (!capture.loss.empty()) out["loss"] = capture.loss;
  out["threads"] = capture.threads;
  out["warmup"] = capture.warmup;
  out["repeats"] = capture.repeats;
  if (!capture.clock.empty()) out["clock"] = capture.clock;
  if (!capture.torch_version.empty()) out["torch"] = capture.torch_version;
  if (!capture.tracer.empty()) out["tracer"] = capture.tracer;
  if (!capture.dtype.empty()) out["dtype"] = capture.dtype;
  if (!capture.kept_whole.empty()) {
    out["kept_whole"] = ordered::array();
    for (const KeptWholeModule& kept : capture.kept_whole)
      out["kept_whole"].push_back({{"module", kept.module}, {"reason", kept.reason}});
  }
  return out;
}

}  // namespace

namespace {

// Builds the document as nlohmann's parser does, except that each element of the top-level "nodes"
// and "edges" arrays goes to `element` once complete instead of into the document. Any surprise (a
// syntax error, a list that is not an array of objects, a key given twice) stops the parse.
class StreamingBuilder : public nlohmann::json_sax<json> {
 public:
  enum class Section { Other, Nodes, Edges };
  explicit StreamingBuilder(std::function<void(Section, json&)> element) : element_(std::move(element)) {}
  json& document() { return root_; }

  bool null() override { return add(nullptr); }
  bool boolean(bool value) override { return add(value); }
  bool number_integer(number_integer_t value) override { return add(value); }
  bool number_unsigned(number_unsigned_t value) override { return add(value); }
  bool number_float(number_float_t value, const string_t&) override { return add(value); }
  bool string(string_t& value) override { return add(std::move(value)); }
  bool binary(binary_t&) override { return false; }
  bool start_object(std::size_t) override {
    if (listing() && stack_.size() == 2) {
      // An element of a list: built apart and handed over whole.
      element_value_ = json::object();
      stack_.push_back(&element_value_);
      return true;
    }
    return open(json::object());
  }
  bool key(string_t& name) override {
    json& object = *stack_.back();
    if (object.contains(name)) return false;  // a repeated key: the exact way says where
    if (stack_.size() == 1)
      section_ = name == "nodes" ? Section::Nodes : name == "edges" ? Section::Edges : Section::Other;
    pending_ = &object[std::move(name)];
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    if (listing() && stack_.size() == 2) element_(section_, element_value_);
    return true;
  }
  bool start_array(std::size_t) override {
    if (listing() && stack_.size() != 1) return false;  // an element that is not an object
    return open(json::array());
  }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  // Inside the value of "nodes" or "edges".
  bool listing() const { return section_ != Section::Other && stack_.size() >= 2; }

  // A value where the parser stands: the root, the next element of an array, the value of a key.
  json* place(json&& value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& container = *stack_.back();
    if (container.is_array()) {
      container.push_back(std::move(value));
      return &container.back();
    }
    *pending_ = std::move(value);
    return pending_;
  }
  bool add(json&& value) {
    // A list that is not an array, or an element of one that is not an object.
    if (section_ != Section::Other && (stack_.size() == 1 || stack_.size() == 2)) return false;
    place(std::move(value));
    return true;
  }
  bool open(json&& container) {
    if (section_ != Section::Other && stack_.size() == 1 && !container.is_array()) return false;
    stack_.push_back(place(std::move(container)));
    return true;
  }

  std::function<void(Section, json&)> element_;
  json root_, element_value_;
  std::vector<json*> stack_;
  json* pending_ = nullptr;
  Section section_ = Section::Other;
};

// The fast way to read a graph: each element of "nodes" and "edges" is read as soon as the parser
// completes it, then dropped, so the document never holds them all (a 200 k-operator graph's tree
// took seconds to build and as long again to free). The names they refer to are looked up once the
// whole document is read. Anything amiss (a syntax error, a bad field, a document of another shape)
// answers nullopt: the caller reads the text again the exact way, whose first error, in document
// order, is the one reported. A document this way reads is one the exact way reads the same.
std::optional<CostGraph> read_streaming(const std::string& text, const std::string& origin) {
  Reader reader(origin);
  StreamedElements streamed;
  using Section = StreamingBuilder::Section;
  StreamingBuilder builder([&](Section section, json& element) {
    if (section == Section::Nodes) {
      const auto name = element.find("name");
      if (name == element.end() || !name->is_string()) throw Error("");  // for the exact way to report
      streamed.node_references.emplace_back();
      streamed.nodes.push_back(
          reader.node(element, json_element("nodes", streamed.nodes.size()), &streamed.node_references.back()));
    } else {
      streamed.edge_references.emplace_back();
      streamed.edges.push_back(
          reader.edge(element, json_element("edges", streamed.edges.size()), &streamed.edge_references.back()));
    }
  });
  try {
    if (!json::sax_parse(text, &builder) || !builder.document().is_object()) return std::nullopt;
    return reader.graph(builder.document(), &streamed);
  } catch (const Error&) {
  } catch (const json::exception&) {}
  return std::nullopt;
}

}  // namespace

CostGraph parse_cost_graph(const std::string& text, const std::string& origin) {
  interop::check_json_nesting(text, origin, "invalid JSON", interop::ColumnUnit::Byte);
  std::optional<CostGraph> graph = read_streaming(text, origin);
  if (!graph) {
    const json document = interop::parse_json_text(text, origin, "invalid JSON", interop::ColumnUnit::Byte);
    graph = Reader(origin).graph(document);
  }
  validate_cost_graph(*graph, origin);
  return std::move(*graph);
}

CostGraph load_cost_graph(const std::string& path) { return parse_cost_graph(read_text_file(path), path); }

std::string cost_graph_to_json(const CostGraph& graph) {
  ordered out = interop::format_header<ordered>(kFormat, kVersion);
  out["name"] = graph.name;
  out["time_unit"] = graph.time_unit;
  out["reference"] = {{"microbatch_size", number_json(graph.reference.microbatch_size)},
                      {"seq_len", number_json(graph.reference.seq_len)}};
  if (graph.hardware)
    out["hardware"] = {{"name", graph.hardware->name},
                       {"flop_rate", number_json(graph.hardware->flop_rate)},
                       {"byte_rate", number_json(graph.hardware->byte_rate)}};
  if (graph.link) out["link"] = interop::link_json(*graph.link);
  out["layers"] = ordered::array();
  for (const LayerInfo& layer : graph.layers)
    out["layers"].push_back({{"name", layer.name}, {"role", layer_role_name(layer.role)}});
  out["nodes"] = ordered::array();
  for (const OperatorNode& node : graph.nodes) out["nodes"].push_back(node_json(graph, node));
  out["edges"] = ordered::array();
  for (const TensorEdge& edge : graph.edges) {
    out["edges"].push_back({{"from", graph.nodes[edge.from].name},
                            {"to", graph.nodes[edge.to].name},
                            {"bytes", polynomial_json(edge.bytes)}});
    if (edge.saved_bytes) out["edges"].back()["saved_bytes"] = polynomial_json(*edge.saved_bytes);
    if (edge.unscaled) out["edges"].back()["unscaled"] = true;
  }
  if (graph.capture) out["capture"] = capture_json(*graph.capture);
  return out.dump(1) + "\n";
}

}  // namespace flexpipe
