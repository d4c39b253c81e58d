// Per-stage aggregation of a cost graph (docs/cost-graph.md). One pass over nodes and one over edges:
// the GPT-3 175B graph aggregates in well under a millisecond.
#include "flexpipe/costs/stage_aggregation.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

const char* memory_decision_name(MemoryDecision decision) {
  switch (decision) {
    case MemoryDecision::Keep: return "keep";
    case MemoryDecision::Recompute: return "recompute";
    case MemoryDecision::Offload: return "offload";
  }
  return "keep";
}

std::vector<int> recompute_segments(const CostGraph& graph, const Partition& partition,
                                    std::span<const MemoryDecision> decisions) {
  const int n = static_cast<int>(graph.nodes.size());
  if (static_cast<int>(decisions.size()) != n || static_cast<int>(partition.stage_of_node.size()) != n)
    throw Error(fmt::format("recompute segments of '{}': {} decisions and {} stage entries for {} operators",
                            graph.name, decisions.size(), partition.stage_of_node.size(), n));
  const std::vector<int>& stage_of = partition.stage_of_node;
  std::vector<int> first(n, -1);
  for (int i = 0; i < n; ++i) {
    if (decisions[i] != MemoryDecision::Recompute) continue;
    const bool continues = i > 0 && first[i - 1] >= 0 && stage_of[i - 1] == stage_of[i] &&
                           graph.nodes[i - 1].layer == graph.nodes[i].layer;
    first[i] = continues ? first[i - 1] : i;
  }
  return first;
}

namespace {

// Every operator goes where its layer goes.
Partition partition_by_layer(const CostGraph& graph, const std::vector<int>& stage_of_layer, int num_stages) {
  Partition partition;
  partition.num_stages = num_stages;
  for (const OperatorNode& node : graph.nodes) {
    if (node.layer == kNoLayer)
      throw Error(fmt::format("operator '{}' has no layer; partition it by operators", node.name));
    partition.stage_of_node.push_back(stage_of_layer[node.layer]);
  }
  check_partition(graph, partition);
  return partition;
}

}  // namespace

Partition partition_from_sizes(const CostGraph& graph, std::span<const int> operators_per_stage) {
  const int n = static_cast<int>(graph.nodes.size());
  if (operators_per_stage.empty()) throw Error("a partition needs at least one stage");
  Partition partition;
  partition.num_stages = static_cast<int>(operators_per_stage.size());
  int total = 0;
  for (size_t k = 0; k < operators_per_stage.size(); ++k) {
    if (operators_per_stage[k] < 0)
      throw Error(fmt::format("stage {}: negative operator count {}", k, operators_per_stage[k]));
    total += operators_per_stage[k];
    if (total > n) break;
    partition.stage_of_node.insert(partition.stage_of_node.end(), operators_per_stage[k], static_cast<int>(k));
  }
  if (total != n)
    throw Error(fmt::format("the stages hold {} operators but the graph '{}' has {}", total, graph.name, n));
  check_partition(graph, partition);
  return partition;
}

Partition partition_from_starts(const CostGraph& graph, std::span<const int> starts) {
  if (starts.size() < 2) throw Error("a partition needs at least one stage");
  std::vector<int> sizes;
  for (size_t k = 0; k + 1 < starts.size(); ++k) sizes.push_back(starts[k + 1] - starts[k]);
  return partition_from_sizes(graph, sizes);
}

std::vector<int> operators_per_stage(const Partition& partition) {
  std::vector<int> sizes(partition.num_stages, 0);
  for (int k : partition.stage_of_node) ++sizes[k];
  return sizes;
}

std::vector<int> stage_starts(const Partition& partition) {
  std::vector<int> starts(1, 0);
  for (int size : operators_per_stage(partition)) starts.push_back(starts.back() + size);
  return starts;
}

Partition partition_from_layer_counts(const CostGraph& graph, std::span<const int> layers_per_stage) {
  const int layers = static_cast<int>(graph.layers.size());
  if (layers_per_stage.empty()) throw Error("a partition needs at least one stage");
  std::vector<int> stage_of_layer;
  for (size_t k = 0; k < layers_per_stage.size(); ++k) {
    if (layers_per_stage[k] < 0) throw Error(fmt::format("stage {}: negative layer count {}", k, layers_per_stage[k]));
    stage_of_layer.insert(stage_of_layer.end(), layers_per_stage[k], static_cast<int>(k));
  }
  if (static_cast<int>(stage_of_layer.size()) != layers)
    throw Error(
        fmt::format("the stages hold {} layers but the graph '{}' has {}", stage_of_layer.size(), graph.name, layers));
  return partition_by_layer(graph, stage_of_layer, static_cast<int>(layers_per_stage.size()));
}

Partition partition_from_sets(const CostGraph& graph, const std::vector<std::vector<std::string>>& stage_nodes) {
  if (stage_nodes.empty()) throw Error("a partition needs at least one stage");
  std::unordered_map<std::string, int> index;
  for (size_t i = 0; i < graph.nodes.size(); ++i) index.emplace(graph.nodes[i].name, static_cast<int>(i));
  Partition partition;
  partition.num_stages = static_cast<int>(stage_nodes.size());
  partition.stage_of_node.assign(graph.nodes.size(), -1);
  for (size_t k = 0; k < stage_nodes.size(); ++k)
    for (const std::string& name : stage_nodes[k]) {
      const auto found = index.find(name);
      if (found == index.end()) throw Error(fmt::format("stage {}: unknown operator '{}'", k, name));
      int& stage = partition.stage_of_node[found->second];
      if (stage >= 0) throw Error(fmt::format("stage {}: operator '{}' is already in stage {}", k, name, stage));
      stage = static_cast<int>(k);
    }
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (partition.stage_of_node[i] < 0) throw Error(fmt::format("operator '{}' is in no stage", graph.nodes[i].name));
  check_partition(graph, partition);
  return partition;
}

Partition partition_evenly(const CostGraph& graph, int num_stages) {
  if (num_stages <= 0) throw Error(fmt::format("a partition needs at least one stage, got {}", num_stages));
  std::vector<int> transformer_layers;
  for (size_t l = 0; l < graph.layers.size(); ++l)
    if (graph.layers[l].role == LayerRole::Transformer) transformer_layers.push_back(static_cast<int>(l));
  if (transformer_layers.empty()) {  // no layer structure: split the operators evenly
    const int n = static_cast<int>(graph.nodes.size());
    std::vector<int> sizes;
    for (int k = 0; k < num_stages; ++k) sizes.push_back((k + 1) * n / num_stages - k * n / num_stages);
    return partition_from_sizes(graph, sizes);
  }
  const int count = static_cast<int>(transformer_layers.size());
  std::vector<int> stage_of_layer(graph.layers.size(), 0);
  for (int t = 0; t < count; ++t)
    stage_of_layer[transformer_layers[t]] = static_cast<int>(int64_t(t) * num_stages / count);
  for (size_t l = 0; l < graph.layers.size(); ++l)
    if (int(l) > transformer_layers.back()) stage_of_layer[l] = num_stages - 1;
  return partition_by_layer(graph, stage_of_layer, num_stages);
}

void check_partition(const CostGraph& graph, const Partition& partition) {
  if (partition.stage_of_node.size() != graph.nodes.size())
    throw Error(fmt::format("the partition places {} operators but the graph '{}' has {}",
                            partition.stage_of_node.size(), graph.name, graph.nodes.size()));
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const int stage = partition.stage_of_node[i];
    if (stage < 0 || stage >= partition.num_stages)
      throw Error(fmt::format("operator '{}' is placed on stage {}, outside 0..{}", graph.nodes[i].name, stage,
                              partition.num_stages - 1));
  }
  for (const TensorEdge& edge : graph.edges) {
    const int from = partition.stage_of_node[edge.from], to = partition.stage_of_node[edge.to];
    if (from > to)
      throw Error(
          fmt::format("the tensor '{}' -> '{}' flows from stage {} back to stage {}; a pipeline only sends forward",
                      graph.nodes[edge.from].name, graph.nodes[edge.to].name, from, to));
  }
}

namespace {

void check_options(const CostGraph& graph, const Partition& partition, const AggregationOptions& options) {
  const int n = static_cast<int>(graph.nodes.size());
  if (!options.decisions.empty() && static_cast<int>(options.decisions.size()) != n)
    throw Error(
        fmt::format("{} memory decisions for the {} operators of '{}'", options.decisions.size(), n, graph.name));
  if (options.shape.microbatch_size <= 0 || options.shape.seq_len <= 0)
    throw Error(fmt::format("micro-batch size and sequence length must be positive, got {} and {}",
                            options.shape.microbatch_size, options.shape.seq_len));
  if (!options.offload_checkpoints.empty() &&
      static_cast<int>(options.offload_checkpoints.size()) != partition.num_stages)
    throw Error(fmt::format("{} checkpoint offload flags for the {} stages of the partition",
                            options.offload_checkpoints.size(), partition.num_stages));
}

// One aggregation, in three passes: the operators (compute, and what each saves under its memory
// decision), the tensors by producer (what crosses each cut, what a stage holds of its input, the
// recompute checkpoints), and the stages (activations, weights, optimizer, offload).
class Aggregation {
 public:
  Aggregation(const CostGraph& graph, const Partition& partition, const AggregationOptions& options)
      : graph_(graph),
        partition_(partition),
        options_(options),
        stage_of_(partition.stage_of_node),
        n_(static_cast<int>(graph.nodes.size())),
        stages_(partition.num_stages),
        b_(options.shape.microbatch_size),
        s_(options.shape.seq_len) {}

  StageAggregate run() {
    sum_operators();
    account_tensors();
    finish_stages();
    result_.table.stages = std::move(costs_);
    result_.table.link = options_.device_link;
    result_.table.devices_per_node = options_.devices_per_node;
    result_.table.inter_node_link = options_.inter_node_link;
    result_.table.host_link = options_.host_link;
    result_.table.memory_capacity = options_.memory_capacity;
    result_.table.time_unit = graph_.time_unit;
    result_.table.memory_unit = "bytes";
    return std::move(result_);
  }

 private:
  MemoryDecision decision(int node) const {
    return options_.decisions.empty() ? MemoryDecision::Keep : options_.decisions[node];
  }
  void sum_operators();
  void account_tensors();
  void finish_stages();

  const CostGraph& graph_;
  const Partition& partition_;
  const AggregationOptions& options_;
  const std::vector<int>& stage_of_;
  const int n_, stages_;
  const double b_, s_;
  StageAggregate result_;
  std::vector<StageCosts> costs_;
  std::vector<std::vector<const OperatorNode*>> stage_nodes_;  // per stage: its operators with buffers
  std::vector<double> held_, held_freed_, rebuilt_, rebuilt_freed_, largest_segment_;
  std::vector<bool> recomputes_, offloads_;
  std::vector<int> segment_of_;
  std::vector<double> checkpoint_, input_held_;
  std::vector<double> received_offloaded_;  // per stage: what offloaded readers save of what it received
};

void Aggregation::sum_operators() {
  result_.details.assign(stages_, {});
  costs_.assign(stages_, StageCosts{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  for (auto* v : {&held_, &held_freed_, &rebuilt_, &rebuilt_freed_, &largest_segment_}) v->assign(stages_, 0);
  recomputes_.assign(stages_, false);
  offloads_.assign(stages_, false);
  segment_of_ = options_.decisions.empty() ? std::vector<int>(n_, -1)
                                           : recompute_segments(graph_, partition_, options_.decisions);
  stage_nodes_.assign(stages_, {});
  double segment_bytes = 0;
  // What a recomputed operator saves of the tensors its segment reads from outside is their
  // checkpoint, which the rebuild reads in place: known where the edges say what their readers save.
  std::vector<double> checkpointed(n_, 0);
  for (const TensorEdge& edge : graph_.edges)
    if (edge.saved_bytes && decision(edge.to) == MemoryDecision::Recompute &&
        !(segment_of_[edge.from] >= 0 && segment_of_[edge.from] == segment_of_[edge.to]))
      checkpointed[edge.to] += edge.saved_bytes->at(b_, s_);

  for (int i = 0; i < n_; ++i) {
    const OperatorNode& node = graph_.nodes[i];
    const int k = stage_of_[i];
    if (!node.buffers.empty()) stage_nodes_[k].push_back(&node);
    StageCosts& stage = costs_[k];
    StageDetails& details = result_.details[k];
    const double forward = operator_time(graph_, node, Pass::Forward, options_.shape);
    stage.forward += forward;
    stage.backward_input += operator_time(graph_, node, Pass::BackwardInput, options_.shape);
    stage.backward_weight += operator_time(graph_, node, Pass::BackwardWeight, options_.shape);
    ++details.operators;
    details.forward_flops += node.forward.flops.at(b_, s_);
    details.workspace_bytes = std::max(details.workspace_bytes, node.workspace_bytes.at(b_, s_));
    // A tied copy is held once per stage that uses it.
    const bool owner_here = node.tied_to != kNotTied && stage_of_[node.tied_to] == k;
    if (!owner_here) details.parameters += node.parameters;
    const double saved = node.saved_bytes.at(b_, s_), freed = node.freed_by_input.at(b_, s_);
    // Tensors the previous operator saves too are held once where both keep them, both offload them
    // or both rebuild them in one segment, and released when neither holds them any more: at I only
    // if both release them then.
    double shared = 0, shared_freed = 0;
    if (i > 0 && stage_of_[i - 1] == k && decision(i - 1) == decision(i) &&
        (decision(i) != MemoryDecision::Recompute || segment_of_[i] == segment_of_[i - 1])) {
      shared = node.shared_saved_bytes.at(b_, s_);
      shared_freed = std::min(shared, std::max(freed, graph_.nodes[i - 1].freed_by_input.at(b_, s_)));
    }
    switch (decision(i)) {
      case MemoryDecision::Offload:
        details.offload_bytes += saved - shared;
        offloads_[k] = true;
        [[fallthrough]];
      case MemoryDecision::Keep:
        held_[k] += saved - shared;
        held_freed_[k] += freed - shared_freed;
        break;
      case MemoryDecision::Recompute: {
        recomputes_[k] = true;
        stage.recompute += forward;
        const double bytes = std::max(0.0, saved - shared - checkpointed[i]);
        rebuilt_[k] += bytes;
        rebuilt_freed_[k] += std::min(bytes, freed - shared_freed);
        segment_bytes = (segment_of_[i] != i ? segment_bytes : 0) + bytes;
        largest_segment_[k] = std::max(largest_segment_[k], segment_bytes);
        break;
      }
    }
  }
}

void Aggregation::account_tensors() {
  // Edges grouped by producer, for the cut crossings and the recompute checkpoints.
  std::vector<int> first_edge(n_ + 1, 0);
  for (const TensorEdge& edge : graph_.edges) ++first_edge[edge.from + 1];
  std::partial_sum(first_edge.begin(), first_edge.end(), first_edge.begin());
  std::vector<int> by_producer(graph_.edges.size());
  {
    std::vector<int> next(first_edge.begin(), first_edge.end() - 1);
    for (size_t e = 0; e < graph_.edges.size(); ++e) by_producer[next[graph_.edges[e].from]++] = static_cast<int>(e);
  }
  checkpoint_.assign(stages_, 0);
  input_held_.assign(stages_, 0);
  received_offloaded_.assign(stages_, 0);
  std::vector<std::pair<int, double>> reads;   // (stage, bytes) one producer's recomputed consumers read
  std::vector<double> limit(stages_, 0);       // per stage: the most of the producer's output a checkpoint keeps
  std::vector<double> kept_holds(stages_, 0);  // per stage: what kept operators save of the producer's output
  for (int p = 0; p < n_; ++p) {
    const int from_stage = stage_of_[p];
    const double output = graph_.nodes[p].output_bytes.at(b_, s_);
    int last_stage = from_stage;
    for (int j = first_edge[p]; j < first_edge[p + 1]; ++j)
      last_stage = std::max(last_stage, stage_of_[graph_.edges[by_producer[j]].to]);
    limit[from_stage] = output;
    // Every cut between the producer and its last consumer carries the part its later consumers read,
    // and every stage after the cut receives it: it is carried through the stages that do not read it.
    for (int cut = from_stage; cut < last_stage; ++cut) {
      double crossing = 0, read_saved = 0;
      for (int j = first_edge[p]; j < first_edge[p + 1]; ++j) {
        const TensorEdge& edge = graph_.edges[by_producer[j]];
        if (stage_of_[edge.to] > cut) crossing += edge.bytes.at(b_, s_);
        if (stage_of_[edge.to] != cut + 1) continue;
        const double saves = (edge.saved_bytes ? *edge.saved_bytes : graph_.nodes[edge.to].saved_bytes).at(b_, s_);
        read_saved += saves;
        if (decision(edge.to) == MemoryDecision::Offload) received_offloaded_[cut + 1] += saves;
      }
      const double received = std::min(output, crossing);
      costs_[cut].output_bytes += received;
      // The runtime holds what a stage receives until the micro-batch's backward ends. What its
      // readers save of it (where the edge does not say, all they save) is counted with their
      // decisions; the rest is held as the stage input, and a recompute checkpoint keeps at most the
      // part the readers hold.
      const double held = std::max(0.0, received - read_saved);
      input_held_[cut + 1] += held;
      limit[cut + 1] = received - held;
    }
    // A recomputed consumer re-reads its inputs that its segment does not rebuild: each is
    // checkpointed once per stage that recomputes from it, less what kept operators of that stage
    // hold of the very tensor already (the producer saving its output, readers saving their input).
    reads.clear();
    kept_holds.assign(stages_, 0);
    if (decision(p) == MemoryDecision::Keep) kept_holds[from_stage] += graph_.nodes[p].saved_output_bytes.at(b_, s_);
    for (int j = first_edge[p]; j < first_edge[p + 1]; ++j) {
      const TensorEdge& edge = graph_.edges[by_producer[j]];
      const int k = stage_of_[edge.to];
      if (edge.saved_bytes && decision(edge.to) == MemoryDecision::Keep) kept_holds[k] += edge.saved_bytes->at(b_, s_);
      const bool rebuilt_with_consumer = segment_of_[p] >= 0 && segment_of_[p] == segment_of_[edge.to];
      if (decision(edge.to) != MemoryDecision::Recompute || rebuilt_with_consumer) continue;
      auto it = std::find_if(reads.begin(), reads.end(), [&](const auto& r) { return r.first == k; });
      if (it == reads.end())
        reads.emplace_back(k, edge.bytes.at(b_, s_));
      else
        it->second += edge.bytes.at(b_, s_);
    }
    for (const auto& [k, bytes] : reads) checkpoint_[k] += std::max(0.0, std::min(limit[k], bytes) - kept_holds[k]);
  }
}

void Aggregation::finish_stages() {
  const double optimizer_rate = graph_.hardware ? graph_.hardware->byte_rate : 0;
  for (int k = 0; k < stages_; ++k) {
    StageCosts& stage = costs_[k];
    StageDetails& details = result_.details[k];
    stage.backward = stage.backward_input + stage.backward_weight;
    details.held_input_bytes = input_held_[k];
    if (recomputes_[k]) {
      // F keeps the checkpointed inputs, the stage input and what kept operators save; R rebuilds
      // the rest.
      stage.checkpoint_bytes = checkpoint_[k] + input_held_[k] + held_[k];
      stage.activation_bytes = rebuilt_[k];
      stage.freed_by_input = rebuilt_freed_[k];
      stage.rebuilt_peak_bytes = largest_segment_[k];
    } else {
      // The stage input stays until the backward ends (not freed by I).
      stage.activation_bytes = held_[k] + input_held_[k];
      stage.freed_by_input = held_freed_[k];
    }
    stage.workspace_bytes = details.workspace_bytes;
    const double weights = details.parameters * options_.parameter_bytes;
    // A captured model's buffers and constants are held beside the weights, never trained.
    stage.parameter_bytes = weights + buffer_bytes(stage_nodes_[k]);
    stage.gradient_bytes = details.parameters * options_.gradient_bytes;
    stage.optimizer_bytes = details.parameters * options_.optimizer_bytes;
    // The step reads weights, gradients and optimizer state and writes weights and state back.
    if (optimizer_rate > 0)
      stage.optimizer = (2 * weights + stage.gradient_bytes + 2 * stage.optimizer_bytes) / optimizer_rate;
    details.input_bytes = k > 0 ? costs_[k - 1].output_bytes : 0;
    // OFFLOAD moves only what the operators decided Offload saved, and the checkpoints where the
    // stage offloads them; with none, the table keeps the simulator's default (everything the
    // micro-batch holds).
    // The runtime moves the stage input with the checkpoints.
    if (recomputes_[k] && !options_.offload_checkpoints.empty() && options_.offload_checkpoints[k]) {
      details.offload_bytes += checkpoint_[k] + input_held_[k];
      offloads_[k] = true;
    }
    // A captured model's runtime holds what a stage received until the backward ends, so OFFLOAD
    // leaves there what offloaded operators save of it (docs/export.md).
    if (graph_.capture)
      details.offload_bytes -= std::min(details.offload_bytes, std::min(received_offloaded_[k], details.input_bytes));
    if (offloads_[k]) stage.offload_bytes = details.offload_bytes;
    details.offload_time = details.offload_bytes > 0 ? options_.host_link.transfer_time(details.offload_bytes) : 0;
  }
}

}  // namespace

StageAggregate aggregate_stages(const CostGraph& graph, const Partition& partition, const AggregationOptions& options) {
  check_partition(graph, partition);
  check_options(graph, partition, options);
  return Aggregation(graph, partition, options).run();
}

}  // namespace flexpipe
