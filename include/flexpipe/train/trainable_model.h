// The models the runtime trains, described by the same ModelConfig the zoo uses, so that one
// description yields both the cost graph (for simulation and partitioning) and the executable
// operator chain: the runtime instantiates exactly one operator per graph node, in graph order, and
// a partition computed on the graph applies to the model one to one.
#pragma once
#include <string>
#include <vector>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/costs/stage_aggregation.h"

namespace flexpipe {

// The decoder families the runtime executes. Both have no dropout (so that runs are deterministic)
// and an LM head not tied to the embedding.
//  - gpt: learned positions, pre-LayerNorm, GeLU MLP of 4x hidden, biases (GPT-2's layout).
//  - llama: rotary positions, pre-RMSNorm, SwiGLU MLP of about 8/3 x hidden (rounded up to a
//    multiple of 8), no biases, grouped-query attention with kv_heads key/value heads.
enum class ModelFamily : uint8_t { Gpt, Llama };

struct ModelSize {
  int layers = 2;
  int hidden = 32;
  int heads = 4;
  int vocab = 64;
  int seq_len = 16;
  ModelFamily family = ModelFamily::Gpt;
  int kv_heads = 0;  // llama: key/value heads, a divisor of heads; 0: heads (no grouping)
};
ModelConfig gpt_config(const ModelSize& size);
ModelConfig llama_config(const ModelSize& size);
ModelConfig trainable_config(const ModelSize& size);  // by size.family
// "gpt" or "llama"; Error for any other name.
ModelFamily model_family(const std::string& name);

// Throws Error naming every feature of `config` the runtime does not execute (dropout, tied
// embeddings, MoE, grouped-query attention, RMSNorm, rotary positions, ...).
void require_trainable(const ModelConfig& config);

// The cost graph of a trainable model at micro-batch size b and the config's sequence length, timed
// on `hardware`, with activations of `activation_bytes` (4: float32, 8: float64).
CostGraph trainable_graph(const ModelConfig& config, double microbatch_size, const std::string& hardware = "H100-80GB",
                          double activation_bytes = 4);

// The producers of each node, in the order its operator takes its inputs (edge order, except that
// attention_v takes the probabilities before the fused QKV).
std::vector<std::vector<int>> operator_inputs(const CostGraph& graph);

// The tensors that cross into each chunk: entry k lists, in increasing order, the nodes before chunk
// k's first node whose output a node of chunk k or later reads (entry 0 is empty). Chunk k-1 sends
// these to chunk k, relaying the ones it received and does not consume itself; the gradients flow
// back the same way. The partition must be contiguous (check_partition).
std::vector<std::vector<int>> boundary_tensors(const CostGraph& graph, const Partition& partition);

// The first node of each chunk, plus the node count at the end.
std::vector<int> chunk_starts(const Partition& partition);

// Contiguous operator ranges, one non-empty range per chunk, minimising the largest chunk's
// forward + backward time (F + I + W at the graph's reference shape). Throws Error when there are
// more chunks than operators.
Partition partition_balanced(const CostGraph& graph, int num_stages);

}  // namespace flexpipe
