// PipeDream's graph.txt profile as a cost graph. PipeDream measures per node: forward and backward
// time (ms), output activation bytes and parameter bytes at the profiled batch; it does not separate the
// input and weight gradients, so the whole backward becomes I and W is zero.
#include "flexpipe/interop/pipedream_import.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "json_reader.h"

namespace flexpipe {

namespace {

constexpr std::string_view kSeparator = " -- ";
constexpr std::string_view kFields[] = {"forward_compute_time", "backward_compute_time", "activation_size",
                                        "parameter_size"};

class PipeDreamReader {
 public:
  PipeDreamReader(const std::string& text, const std::string& origin, const PipeDreamImportOptions& options)
      : text_(text), origin_(origin), options_(options) {}

  CostGraph read() {
    if (options_.profiled_microbatch_size <= 0 || options_.parameter_bytes <= 0)
      throw Error(fmt::format("{}: the profiled micro-batch size and parameter bytes must be positive", origin_));
    size_t start = 0;
    for (int number = 1; start <= text_.size(); ++number) {
      size_t end = text_.find('\n', start);
      if (end == std::string::npos) end = text_.size();
      line_ = std::string_view(text_).substr(start, end - start);
      if (!line_.empty() && line_.back() == '\r') line_.remove_suffix(1);
      line_number_ = number;
      if (line_.find_first_not_of(" \t") != std::string_view::npos) read_line();
      start = end + 1;
    }
    if (graph_.nodes.empty())
      throw Error(fmt::format("{}: no node lines (nodeN -- DESC -- forward_compute_time=...)", origin_));
    return ordered();
  }

 private:
  [[noreturn]] void fail(size_t column, const std::string& message) const {
    throw Error(fmt::format("{}\n{}\n{}^", located(origin_, line_number_, static_cast<int>(column) + 1, message),
                            std::string(line_), std::string(column, ' ')));
  }

  size_t column_of(std::string_view part) const { return static_cast<size_t>(part.data() - line_.data()); }

  void read_line() {
    const size_t first = line_.find_first_not_of(" \t");
    if (line_[0] == '\t' || line_[0] == ' ') {
      read_edge(first);
      return;
    }
    read_node();
  }

  void read_node() {
    const size_t first_separator = line_.find(kSeparator);
    if (first_separator == std::string_view::npos)
      fail(0,
           "expected a node line 'nodeN -- DESC -- forward_compute_time=..., backward_compute_time=..., "
           "activation_size=..., parameter_size=...' or a tab-indented edge line 'nodeA -- nodeB'");
    const std::string_view id = line_.substr(0, first_separator);
    // The description is free text; the metadata starts at " -- forward_compute_time=".
    const std::string marker = fmt::format("{}{}=", kSeparator, kFields[0]);
    const size_t marker_at = line_.find(marker, first_separator);
    if (marker_at == std::string_view::npos)
      fail(line_.size(), "expected ' -- forward_compute_time=...' after the node's description");
    const size_t description_at = std::min(marker_at, first_separator + kSeparator.size());
    const std::string_view description = line_.substr(description_at, marker_at - description_at);
    std::string_view metadata = line_.substr(marker_at + kSeparator.size());
    std::string_view stage;
    if (const size_t tail = metadata.find(kSeparator); tail != std::string_view::npos) {
      stage = metadata.substr(tail + kSeparator.size());
      metadata = metadata.substr(0, tail);
    }
    if (auto [it, inserted] = node_lines_.emplace(std::string(id), line_number_); !inserted)
      fail(0, fmt::format("node '{}' is already defined on line {}", id, it->second));

    double values[4] = {0, 0, 0, 0};
    std::string_view rest = metadata;
    for (int f = 0; f < 4; ++f) {
      const std::string key = std::string(kFields[f]) + "=";
      if (rest.substr(0, key.size()) != key) fail(column_of(rest), fmt::format("expected '{}NUMBER'", key));
      rest.remove_prefix(key.size());
      const size_t comma = f < 3 ? rest.find(", ") : rest.size();
      if (comma == std::string_view::npos)
        fail(column_of(rest) + rest.size(), fmt::format("expected ', {}='", kFields[f + 1]));
      const std::string_view value = rest.substr(0, comma);
      values[f] = f == 2 ? activation(value) : number(value, kFields[f]);
      rest.remove_prefix(std::min(rest.size(), comma + 2));
    }
    OperatorNode node;
    node.name = std::string(id);
    node.kind = std::string(description.substr(0, description.find('(')));
    node.scaling = {ScalingRule::Power, 1, 0};
    node.forward.time = values[0];
    node.backward_input.time = values[1];
    const double bytes_per_sample = values[2] / options_.profiled_microbatch_size;
    node.saved_bytes = node.freed_by_input = node.output_bytes = per_sample(bytes_per_sample);
    node.parameters = node.active_parameters = values[3] / options_.parameter_bytes;
    if (!stage.empty()) node.layer = stage_layer(stage);
    index_.emplace(node.name, static_cast<int>(graph_.nodes.size()));
    graph_.nodes.push_back(std::move(node));
  }

  // "stage_id=K": the profile was already partitioned; each stage becomes a layer.
  int stage_layer(std::string_view part) {
    constexpr std::string_view key = "stage_id=";
    if (part.substr(0, key.size()) != key) fail(column_of(part), "expected 'stage_id=K' after the metadata");
    const std::string_view digits = part.substr(key.size());
    int stage = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), stage);
    if (error != std::errc() || end != digits.data() + digits.size() || stage < 0)
      fail(column_of(digits), fmt::format("'{}' is not a stage number", digits));
    const std::string name = fmt::format("stage.{}", stage);
    for (size_t l = 0; l < graph_.layers.size(); ++l)
      if (graph_.layers[l].name == name) return static_cast<int>(l);
    graph_.layers.push_back({name, LayerRole::Other});
    return static_cast<int>(graph_.layers.size()) - 1;
  }

  // `field` names the value in errors: a line's fields have no other path.
  double number(std::string_view text, std::string_view field) const {
    double value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size() || text.empty())
      fail(column_of(text), fmt::format("{}: '{}' is not a number", field, printable(text)));
    // from_chars reads "nan" and "inf" as numbers; a NaN time would pass every comparison after it.
    if (!std::isfinite(value)) fail(column_of(text), fmt::format("{}: '{}' is not a finite number", field, text));
    if (value < 0) fail(column_of(text), fmt::format("{}: '{}' must not be negative", field, text));
    // The cost graph's own bound (the JSON readers'): sums over stages and micro-batches stay finite.
    if (value > interop::kLargestNumber)
      fail(column_of(text), fmt::format("{}: '{}' is too large (at most 1e30)", field, text));
    return value;
  }

  // A number, or a list "[A; B]" for several outputs: their sum.
  double activation(std::string_view text) const {
    constexpr std::string_view field = kFields[2];
    if (text.empty() || text.front() != '[') return number(text, field);
    if (text.back() != ']') fail(column_of(text) + text.size(), "expected ']' closing the activation sizes");
    std::string_view inside = text.substr(1, text.size() - 2);
    double total = 0;
    while (!inside.empty()) {
      const size_t separator = inside.find("; ");
      total += number(inside.substr(0, separator), field);
      if (separator == std::string_view::npos) break;
      inside.remove_prefix(separator + 2);
    }
    return total;
  }

  void read_edge(size_t first) {
    const std::string_view body = line_.substr(first);
    const size_t separator = body.find(kSeparator);
    if (separator == std::string_view::npos) fail(first, "expected an edge 'nodeA -- nodeB'");
    const std::string_view from = body.substr(0, separator);
    std::string_view to = body.substr(separator + kSeparator.size());
    while (!to.empty() && (to.back() == ' ' || to.back() == '\t')) to.remove_suffix(1);
    edges_.push_back({std::string(from), std::string(to), line_number_, first, first + separator + kSeparator.size(),
                      std::string(line_)});
  }

  struct PendingEdge {
    std::string from, to;
    int line;
    size_t from_column, to_column;
    std::string text;
  };

  [[noreturn]] void fail_at(const PendingEdge& edge, size_t column, const std::string& message) {
    line_number_ = edge.line;
    line_ = edge.text;
    fail(column, message);
  }

  // Resolves edges and stores the nodes in a topological order (file order where it already is one).
  CostGraph ordered() {
    std::map<std::pair<int, int>, size_t> first_line;
    for (size_t e = 0; e < edges_.size(); ++e) {
      const PendingEdge& edge = edges_[e];
      const auto from = index_.find(edge.from), to = index_.find(edge.to);
      if (from == index_.end())
        fail_at(edge, edge.from_column, fmt::format("unknown node '{}' (no node line defines it)", edge.from));
      if (to == index_.end())
        fail_at(edge, edge.to_column, fmt::format("unknown node '{}' (no node line defines it)", edge.to));
      if (auto [it, inserted] = first_line.emplace(std::pair{from->second, to->second}, e); !inserted)
        fail_at(edge, edge.from_column,
                fmt::format("duplicate edge '{}' -> '{}' (first on line {})", edge.from, edge.to,
                            edges_[it->second].line));
      graph_.edges.push_back({from->second, to->second, graph_.nodes[from->second].output_bytes});
    }
    const int n = static_cast<int>(graph_.nodes.size());
    if (std::vector<int> cycle = find_cycle(n, graph_.edges); !cycle.empty()) {
      // Blame the cycle's edge that comes last in the file, and spell the cycle from its target.
      size_t closing = 0, closing_at = 0;
      for (size_t i = 0; i < cycle.size(); ++i) {
        const size_t e = first_line.at({cycle[i], cycle[(i + 1) % cycle.size()]});
        if (e >= closing) closing = e, closing_at = (i + 1) % cycle.size();
      }
      std::rotate(cycle.begin(), cycle.begin() + closing_at, cycle.end());
      std::string text;
      for (int node : cycle) text += fmt::format("'{}' -> ", graph_.nodes[node].name);
      text += fmt::format("'{}'", graph_.nodes[cycle.front()].name);
      fail_at(edges_[closing], edges_[closing].from_column, fmt::format("this edge closes a cycle: {}", text));
    }
    // Kahn's algorithm, always taking the earliest-defined ready node.
    std::vector<std::vector<int>> successors(n);
    std::vector<int> in_degree(n, 0);
    for (const TensorEdge& edge : graph_.edges) {
      successors[edge.from].push_back(edge.to);
      ++in_degree[edge.to];
    }
    std::set<int> ready;
    for (int i = 0; i < n; ++i)
      if (in_degree[i] == 0) ready.insert(i);
    std::vector<int> new_index(n, -1);
    CostGraph result;
    result.name = origin_;
    result.time_unit = "ms";
    result.reference = {options_.profiled_microbatch_size, 1};
    result.layers = graph_.layers;
    while (!ready.empty()) {
      const int node = *ready.begin();
      ready.erase(ready.begin());
      new_index[node] = static_cast<int>(result.nodes.size());
      result.nodes.push_back(graph_.nodes[node]);
      for (int next : successors[node])
        if (--in_degree[next] == 0) ready.insert(next);
    }
    for (const TensorEdge& edge : graph_.edges)
      result.edges.push_back({new_index[edge.from], new_index[edge.to], edge.bytes});
    validate_cost_graph(result, origin_);
    return result;
  }

  const std::string& text_;
  const std::string& origin_;
  const PipeDreamImportOptions& options_;
  std::string_view line_;
  int line_number_ = 0;
  CostGraph graph_;
  std::unordered_map<std::string, int> index_;
  std::unordered_map<std::string, int> node_lines_;
  std::vector<PendingEdge> edges_;
};

}  // namespace

CostGraph parse_pipedream_graph(const std::string& text, const std::string& origin,
                                const PipeDreamImportOptions& options) {
  return PipeDreamReader(text, origin, options).read();
}

CostGraph load_pipedream_graph(const std::string& path, const PipeDreamImportOptions& options) {
  return parse_pipedream_graph(read_text_file(path), path, options);
}

}  // namespace flexpipe
