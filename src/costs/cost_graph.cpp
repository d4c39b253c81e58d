// Cost graph queries and the structural checks every reader of a graph relies on.
#include "flexpipe/costs/cost_graph.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

ShapePolynomial& ShapePolynomial::operator+=(const ShapePolynomial& other) {
  fixed += other.fixed;
  per_sample += other.per_sample;
  per_token += other.per_token;
  per_token_seq += other.per_token_seq;
  return *this;
}

ShapePolynomial operator*(double factor, ShapePolynomial p) {
  p.fixed *= factor;
  p.per_sample *= factor;
  p.per_token *= factor;
  p.per_token_seq *= factor;
  return p;
}

const PassCost& pass_cost(const OperatorNode& node, Pass pass) {
  switch (pass) {
    case Pass::Forward: return node.forward;
    case Pass::BackwardInput: return node.backward_input;
    case Pass::BackwardWeight: return node.backward_weight;
  }
  return node.forward;
}

double roofline_time(const PassCost& cost, const RooflineRates& rates, const Shape& shape) {
  const double compute = cost.flops.at(shape.microbatch_size, shape.seq_len) / rates.flop_rate;
  const double memory = cost.bytes.at(shape.microbatch_size, shape.seq_len) / rates.byte_rate;
  return std::max(compute, memory);
}

double operator_time(const CostGraph& graph, const OperatorNode& node, Pass pass, const Shape& shape) {
  const PassCost& cost = pass_cost(node, pass);
  if (cost.time == 0 || shape == graph.reference) return cost.time;
  if (node.scaling.rule == ScalingRule::Power) {
    return cost.time * std::pow(shape.microbatch_size / graph.reference.microbatch_size, node.scaling.batch_exponent) *
           std::pow(shape.seq_len / graph.reference.seq_len, node.scaling.sequence_exponent);
  }
  // A time with neither FLOPs nor bytes behind it (a fixed overhead) does not scale.
  const double at_reference = roofline_time(cost, *graph.hardware, graph.reference);
  if (at_reference == 0) return cost.time;
  return cost.time * roofline_time(cost, *graph.hardware, shape) / at_reference;
}

CostGraph with_activation_bytes_scaled(CostGraph graph, double factor) {
  for (OperatorNode& node : graph.nodes) {
    const ShapePolynomial unscaled = node.unscaled_saved_bytes;
    // What I frees is all the node saves or none of it where a capture wrote it.
    const bool frees_all = node.freed_by_input == node.saved_bytes;
    for (ShapePolynomial* bytes : {&node.saved_bytes, &node.freed_by_input, &node.shared_saved_bytes,
                                   &node.saved_output_bytes, &node.output_bytes, &node.workspace_bytes})
      *bytes = factor * *bytes;
    if (!unscaled.is_zero()) {
      node.saved_bytes += (1 - factor) * unscaled;
      if (frees_all) node.freed_by_input = node.saved_bytes;
    }
    for (BufferUse& buffer : node.buffers)
      if (!buffer.unscaled) buffer.bytes *= factor;
  }
  for (TensorEdge& edge : graph.edges) {
    if (edge.unscaled) continue;
    edge.bytes = factor * edge.bytes;
    if (edge.saved_bytes) *edge.saved_bytes = factor * *edge.saved_bytes;
  }
  return graph;
}

double captured_element_bytes(const CaptureRecord& capture) {
  if (capture.dtype == "float64") return 8;
  if (capture.dtype == "float32") return 4;
  if (capture.dtype == "float16" || capture.dtype == "bfloat16") return 2;
  for (const CapturedInput& input : capture.inputs) {
    if (input.dtype == "float64") return 8;
    if (input.dtype == "float32") return 4;
    if (input.dtype == "float16" || input.dtype == "bfloat16") return 2;
  }
  return 4;
}

double buffer_bytes(const std::vector<const OperatorNode*>& nodes) {
  std::vector<const std::string*> seen;
  double total = 0;
  for (const OperatorNode* node : nodes)
    for (const BufferUse& buffer : node->buffers) {
      if (std::find_if(seen.begin(), seen.end(), [&](const std::string* name) { return *name == buffer.name; }) !=
          seen.end())
        continue;
      seen.push_back(&buffer.name);
      total += buffer.bytes;
    }
  return total;
}

double total_parameters(const CostGraph& graph) {
  double total = 0;
  for (const OperatorNode& node : graph.nodes)
    if (node.tied_to == kNotTied) total += node.parameters;
  return total;
}

double total_active_parameters(const CostGraph& graph) {
  double total = 0;
  for (const OperatorNode& node : graph.nodes)
    if (node.tied_to == kNotTied) total += node.active_parameters;
  return total;
}

int find_node(const CostGraph& graph, const std::string& name) {
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (graph.nodes[i].name == name) return static_cast<int>(i);
  return -1;
}

const char* layer_role_name(LayerRole role) {
  switch (role) {
    case LayerRole::Embedding: return "embedding";
    case LayerRole::Transformer: return "transformer";
    case LayerRole::Mtp: return "mtp";
    case LayerRole::Loss: return "loss";
    case LayerRole::Other: return "other";
  }
  return "other";
}

std::vector<int> find_cycle(int num_nodes, const std::vector<TensorEdge>& edges) {
  std::vector<std::vector<int>> predecessors(num_nodes), successors(num_nodes);
  std::vector<int> remaining(num_nodes, 0);
  for (const TensorEdge& edge : edges) {
    successors[edge.from].push_back(edge.to);
    predecessors[edge.to].push_back(edge.from);
    ++remaining[edge.to];
  }
  // Kahn's algorithm: what it cannot order lies on or behind a cycle.
  std::vector<int> ready;
  for (int i = 0; i < num_nodes; ++i)
    if (remaining[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    const int node = ready.back();
    ready.pop_back();
    for (int next : successors[node])
      if (--remaining[next] == 0) ready.push_back(next);
  }
  int start = 0;
  while (start < num_nodes && remaining[start] == 0) ++start;
  if (start == num_nodes) return {};
  // Every unordered node has an unordered predecessor: walking them must revisit a node.
  std::vector<int> seen_at(num_nodes, -1);
  std::vector<int> walk;
  int current = start;
  while (seen_at[current] < 0) {
    seen_at[current] = static_cast<int>(walk.size());
    walk.push_back(current);
    for (int previous : predecessors[current])
      if (remaining[previous] > 0) {
        current = previous;
        break;
      }
  }
  std::vector<int> cycle(walk.begin() + seen_at[current], walk.end());
  std::reverse(cycle.begin(), cycle.end());
  return cycle;
}

void validate_cost_graph(const CostGraph& graph, const std::string& origin) {
  auto fail = [&](const std::string& message) { throw Error(located(origin, 0, 0, message)); };
  const int n = static_cast<int>(graph.nodes.size());
  if (n == 0) fail("the graph has no operators");
  if (graph.reference.microbatch_size <= 0 || graph.reference.seq_len <= 0)
    fail(fmt::format("reference shape must be positive, got micro-batch size {} and sequence length {}",
                     graph.reference.microbatch_size, graph.reference.seq_len));
  if (graph.hardware && (graph.hardware->flop_rate <= 0 || graph.hardware->byte_rate <= 0))
    fail(fmt::format("hardware '{}' needs positive flop_rate and byte_rate", graph.hardware->name));

  std::unordered_map<std::string, int> layer_index;
  for (size_t i = 0; i < graph.layers.size(); ++i)
    if (!layer_index.emplace(graph.layers[i].name, static_cast<int>(i)).second)
      fail(fmt::format("layers[{}]: layer '{}' is defined twice", i, graph.layers[i].name));

  std::unordered_map<std::string, int> index;
  index.reserve(n);
  for (int i = 0; i < n; ++i) {
    const OperatorNode& node = graph.nodes[i];
    // Spelled out only for a message: a large graph has hundreds of thousands of nodes.
    const auto where = [&] { return fmt::format("nodes[{}] ('{}')", i, node.name); };
    if (node.name.empty()) fail(fmt::format("nodes[{}]: the name is empty", i));
    if (auto [it, inserted] = index.emplace(node.name, i); !inserted)
      fail(fmt::format("{}: the name is already used by nodes[{}]", where(), it->second));
    if (node.layer != kNoLayer && (node.layer < 0 || node.layer >= static_cast<int>(graph.layers.size())))
      fail(fmt::format("{}: layer index {} is out of range", where(), node.layer));
    if (node.tied_to != kNotTied) {
      if (node.tied_to < 0 || node.tied_to >= n || node.tied_to == i)
        fail(fmt::format("{}: tied_to index {} is not another node", where(), node.tied_to));
      if (graph.nodes[node.tied_to].tied_to != kNotTied)
        fail(fmt::format("{}: tied to '{}', which is itself tied; tie to the owner of the parameters", where(),
                         graph.nodes[node.tied_to].name));
    }
    if (node.active_parameters > node.parameters)
      fail(fmt::format("{}: active_parameters {} exceed parameters {}", where(), node.active_parameters,
                       node.parameters));
    const double saved = node.saved_bytes.at(graph.reference.microbatch_size, graph.reference.seq_len);
    const double freed = node.freed_by_input.at(graph.reference.microbatch_size, graph.reference.seq_len);
    if (freed > saved)
      fail(fmt::format("{}: freed_by_input {} exceeds saved_bytes {} at the reference shape", where(), freed, saved));
    if (const double shared = node.shared_saved_bytes.at(graph.reference.microbatch_size, graph.reference.seq_len);
        shared > 0) {
      if (i == 0) fail(fmt::format("{}: shared_saved_bytes {} but no node comes before it", where(), shared));
      const double previous =
          graph.nodes[i - 1].saved_bytes.at(graph.reference.microbatch_size, graph.reference.seq_len);
      if (shared > std::min(saved, previous))
        fail(
            fmt::format("{}: shared_saved_bytes {} exceed what it saves ({}) or what '{}' before it saves ({}) at the "
                        "reference shape",
                        where(), shared, saved, graph.nodes[i - 1].name, previous));
    }
    if (const double unscaled = node.unscaled_saved_bytes.at(graph.reference.microbatch_size, graph.reference.seq_len);
        unscaled > saved)
      fail(fmt::format("{}: unscaled_saved_bytes {} exceed saved_bytes {} at the reference shape", where(), unscaled,
                       saved));
    if (const double own = node.saved_output_bytes.at(graph.reference.microbatch_size, graph.reference.seq_len);
        own > 0) {
      const double output = node.output_bytes.at(graph.reference.microbatch_size, graph.reference.seq_len);
      if (own > std::min(saved, output))
        fail(fmt::format("{}: saved_output_bytes {} exceed saved_bytes {} or output_bytes {} at the reference shape",
                         where(), own, saved, output));
    }
    if (node.scaling.rule == ScalingRule::Roofline && !graph.hardware)
      fail(fmt::format("{}: scales by roofline but the graph names no hardware rates", where()));
  }

  std::set<std::pair<int, int>> seen;
  std::vector<double> saved_from_inputs(n, 0);
  for (size_t e = 0; e < graph.edges.size(); ++e) {
    const TensorEdge& edge = graph.edges[e];
    if (edge.from < 0 || edge.from >= n || edge.to < 0 || edge.to >= n)
      fail(fmt::format("edges[{}]: node index out of range ({} -> {}, {} nodes)", e, edge.from, edge.to, n));
    const auto where = [&] {
      return fmt::format("edges[{}] ('{}' -> '{}')", e, graph.nodes[edge.from].name, graph.nodes[edge.to].name);
    };
    if (edge.from == edge.to) fail(fmt::format("{}: an operator cannot feed itself (cycle)", where()));
    if (!seen.emplace(edge.from, edge.to).second) fail(fmt::format("{}: duplicate edge", where()));
    if (!edge.saved_bytes) continue;
    const double saved = edge.saved_bytes->at(graph.reference.microbatch_size, graph.reference.seq_len);
    const double bytes = edge.bytes.at(graph.reference.microbatch_size, graph.reference.seq_len);
    if (saved > bytes)
      fail(
          fmt::format("{}: saved_bytes {} exceed the tensor's bytes {} at the reference shape", where(), saved, bytes));
    saved_from_inputs[edge.to] += saved;
  }
  for (int i = 0; i < n; ++i) {
    const double saved = graph.nodes[i].saved_bytes.at(graph.reference.microbatch_size, graph.reference.seq_len);
    // Relative slack: the two sums round differently.
    if (saved_from_inputs[i] > saved * (1 + 1e-12))
      fail(
          fmt::format("nodes[{}] ('{}'): its edges' saved_bytes add up to {}, more than it saves ({}) at the "
                      "reference shape",
                      i, graph.nodes[i].name, saved_from_inputs[i], saved));
  }
  for (int i = 1; i < n; ++i) {
    if (graph.nodes[i].shared_saved_bytes.is_zero()) continue;
    const auto where = [&] { return fmt::format("nodes[{}] ('{}')", i, graph.nodes[i].name); };
    if (!seen.count({i - 1, i}))
      fail(fmt::format("{}: shares saved tensors with '{}' before it, which does not feed it", where(),
                       graph.nodes[i - 1].name));
    if (graph.nodes[i].layer != graph.nodes[i - 1].layer)
      fail(fmt::format("{}: shares saved tensors with '{}' before it, which is in another layer", where(),
                       graph.nodes[i - 1].name));
  }

  if (const std::vector<int> cycle = find_cycle(n, graph.edges); !cycle.empty()) {
    std::string text;
    for (int node : cycle) text += fmt::format("'{}' -> ", graph.nodes[node].name);
    fail(fmt::format("the graph has a cycle: {}'{}'", text, graph.nodes[cycle.front()].name));
  }

  for (size_t e = 0; e < graph.edges.size(); ++e) {
    const TensorEdge& edge = graph.edges[e];
    if (edge.from > edge.to)
      fail(fmt::format("edges[{}] ('{}' -> '{}'): '{}' is listed before '{}'; list the nodes in a topological order", e,
                       graph.nodes[edge.from].name, graph.nodes[edge.to].name, graph.nodes[edge.to].name,
                       graph.nodes[edge.from].name));
  }
}

}  // namespace flexpipe
