// The models the runtime trains: their families and sizes as the zoo's ModelConfig.
#include "flexpipe/train/trainable_model.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

// What both families share: the checked size, a decoder without dropout (deterministic runs) and
// with an LM head of its own.
ModelConfig decoder(const ModelSize& size, const char* family) {
  if (size.layers < 1 || size.hidden < 1 || size.heads < 1 || size.vocab < 2 || size.seq_len < 1)
    throw Error(
        fmt::format("{} size: layers, hidden, heads, seq-len must be positive and vocab at least 2 "
                    "(got {}, {}, {}, {}, {})",
                    family, size.layers, size.hidden, size.heads, size.seq_len, size.vocab));
  if (size.hidden % size.heads != 0)
    throw Error(fmt::format("{} size: hidden {} is not a multiple of heads {}", family, size.hidden, size.heads));
  ModelConfig c;
  c.architecture = Architecture::Decoder;
  c.layers = size.layers;
  c.hidden = size.hidden;
  c.heads = c.kv_heads = size.heads;
  c.head_dim = size.hidden / size.heads;
  c.vocab = size.vocab;
  c.seq_len = c.max_positions = size.seq_len;
  c.dropout = false;
  c.tied_embeddings = false;
  return c;
}

}  // namespace

ModelFamily model_family(const std::string& name) {
  if (name == "gpt") return ModelFamily::Gpt;
  if (name == "llama") return ModelFamily::Llama;
  throw Error(fmt::format("unknown model family '{}' (known: gpt, llama)", name));
}

ModelConfig trainable_config(const ModelSize& size) {
  return size.family == ModelFamily::Llama ? llama_config(size) : gpt_config(size);
}

ModelConfig llama_config(const ModelSize& size) {
  ModelConfig c = decoder(size, "Llama");
  if (size.kv_heads > 0) c.kv_heads = size.kv_heads;
  if (size.kv_heads < 0 || size.heads % c.kv_heads != 0)
    throw Error(fmt::format("Llama size: {} key/value heads do not divide {} heads", size.kv_heads, size.heads));
  if (c.head_dim % 2 != 0)
    throw Error(
        fmt::format("Llama size: rotary positions turn pairs, so the head size (hidden {} / heads {}) must be even",
                    size.hidden, size.heads));
  c.name = fmt::format("llama-{}x{}", size.layers, size.hidden);
  c.description = fmt::format(
      "Llama-style decoder: {} layers, hidden {}, {} heads ({} key/value), vocabulary {}, "
      "sequence {}",
      size.layers, size.hidden, size.heads, c.kv_heads, size.vocab, size.seq_len);
  c.ffn_hidden = (8 * size.hidden / 3 + 7) / 8 * 8;
  c.norm = NormKind::RmsNorm;
  c.mlp = MlpKind::SwiGlu;
  c.position = PositionKind::Rotary;
  c.biases = false;
  c.source = "FlexPipe runtime model (Llama layout without tied embeddings)";
  return c;
}

ModelConfig gpt_config(const ModelSize& size) {
  ModelConfig c = decoder(size, "GPT");
  c.name = fmt::format("gpt-{}x{}", size.layers, size.hidden);
  c.description = fmt::format("GPT-style decoder: {} layers, hidden {}, {} heads, vocabulary {}, sequence {}",
                              size.layers, size.hidden, size.heads, size.vocab, size.seq_len);
  c.ffn_hidden = 4 * size.hidden;
  c.norm = NormKind::LayerNorm;
  c.mlp = MlpKind::Gelu;
  c.position = PositionKind::Learned;
  c.biases = true;
  c.source = "FlexPipe runtime model (GPT-2 layout without dropout and without tied embeddings)";
  return c;
}

void require_trainable(const ModelConfig& c) {
  std::vector<std::string> problems;
  if (c.architecture != Architecture::Decoder) problems.push_back("only decoder models are trainable");
  if (c.mlp == MlpKind::Relu) problems.push_back("a ReLU MLP (GeLU or SwiGLU only)");
  if (c.position == PositionKind::RelativeBias) problems.push_back("relative position biases");
  if (c.dropout) problems.push_back("dropout (runs must be deterministic)");
  if (c.tied_embeddings) problems.push_back("an LM head tied to the embedding");
  if (c.moe.experts > 0) problems.push_back("mixture-of-experts layers");
  if (c.kv_heads < 1 || c.heads % c.kv_heads != 0) problems.push_back("key/value heads that do not divide the heads");
  if (c.head_dim * c.heads != c.hidden) problems.push_back("head_dim * heads != hidden");
  if (c.token_types > 0 || c.post_norm) problems.push_back("BERT-style embeddings or post-norm");
  if (problems.empty()) return;
  std::string text;
  for (const std::string& p : problems) text += (text.empty() ? "" : "; ") + p;
  throw Error(fmt::format("model {} cannot be trained by the runtime: {}", c.name, text));
}

CostGraph trainable_graph(const ModelConfig& config, double microbatch_size, const std::string& hardware,
                          double activation_bytes) {
  require_trainable(config);
  ModelOptions options;
  options.microbatch_size = microbatch_size;
  options.activation_bytes = activation_bytes;
  return build_model_graph(config, find_hardware(hardware), options);
}

std::vector<std::vector<int>> operator_inputs(const CostGraph& graph) {
  std::vector<std::vector<int>> inputs(graph.nodes.size());
  for (const TensorEdge& e : graph.edges) inputs[e.to].push_back(e.from);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (graph.nodes[n].kind != "bmm" || inputs[n].size() != 2) continue;
    // attention_v reads (P, QKV): put the softmax first whatever order the edges were added in.
    if (graph.nodes[inputs[n][1]].kind == "softmax") std::swap(inputs[n][0], inputs[n][1]);
  }
  return inputs;
}

std::vector<int> chunk_starts(const Partition& partition) {
  std::vector<int> starts(partition.num_stages + 1, static_cast<int>(partition.stage_of_node.size()));
  for (int n = static_cast<int>(partition.stage_of_node.size()) - 1; n >= 0; --n)
    starts[partition.stage_of_node[n]] = n;
  for (int k = partition.num_stages - 1; k >= 0; --k) starts[k] = std::min(starts[k], starts[k + 1]);
  return starts;
}

std::vector<std::vector<int>> boundary_tensors(const CostGraph& graph, const Partition& partition) {
  check_partition(graph, partition);
  const std::vector<int> starts = chunk_starts(partition);
  // The last reader of each node's output decides how far it travels.
  std::vector<int> last_reader(graph.nodes.size(), -1);
  for (const TensorEdge& e : graph.edges) last_reader[e.from] = std::max(last_reader[e.from], e.to);
  std::vector<std::vector<int>> crossing(partition.num_stages);
  for (int k = 1; k < partition.num_stages; ++k)
    for (int n = 0; n < starts[k]; ++n)
      if (last_reader[n] >= starts[k]) crossing[k].push_back(n);
  return crossing;
}

Partition partition_balanced(const CostGraph& graph, int num_stages) {
  const int n = static_cast<int>(graph.nodes.size());
  if (num_stages < 1 || num_stages > n)
    throw Error(fmt::format("cannot cut {} operators of {} into {} non-empty stages", n, graph.name, num_stages));
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    const OperatorNode& node = graph.nodes[i];
    prefix[i + 1] = prefix[i] + operator_time(graph, node, Pass::Forward, graph.reference) +
                    operator_time(graph, node, Pass::BackwardInput, graph.reference) +
                    operator_time(graph, node, Pass::BackwardWeight, graph.reference);
  }
  // best[k][i]: the smallest largest-stage time of the first i operators in k stages.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(num_stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(num_stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= num_stages; ++k)
    for (int i = k; i <= n - (num_stages - k); ++i)
      for (int j = k - 1; j < i; ++j) {
        const double value = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (value < best[k][i]) {
          best[k][i] = value;
          cut[k][i] = j;
        }
      }
  Partition partition;
  partition.num_stages = num_stages;
  partition.stage_of_node.assign(n, 0);
  for (int k = num_stages, i = n; k >= 1; --k) {
    const int j = cut[k][i];
    for (int node = j; node < i; ++node) partition.stage_of_node[node] = k - 1;
    i = j;
  }
  return partition;
}

}  // namespace flexpipe
