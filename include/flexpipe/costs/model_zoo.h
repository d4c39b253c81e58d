// Real architectures generated at operator granularity (docs/model-zoo.md): GPT-3, Llama-2/3, BERT,
// T5, ViT and mixture-of-experts models, with embedding, final norm, head and loss, timed on a
// hardware profile by max(FLOPs / (peak * eff), bytes / (HBM bandwidth * eff)).
#pragma once
#include <span>
#include <string>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/hardware.h"

namespace flexpipe {

enum class Architecture : uint8_t { Decoder, EncoderOnly, EncoderDecoder, Vision };
enum class NormKind : uint8_t { LayerNorm, RmsNorm };
enum class MlpKind : uint8_t { Gelu, Relu, SwiGlu };
enum class PositionKind : uint8_t { Learned, Rotary, RelativeBias };

struct MoeConfig {
  int experts = 0;  // 0: dense model
  int top_k = 0;
  int expert_ffn_hidden = 0;
  int shared_experts = 0;  // always-on experts of expert_ffn_hidden each (DeepSeekMoE)
  int dense_layers = 0;    // the first layers keep a dense MLP of ffn_hidden
};

struct ModelConfig {
  std::string name;
  std::string description;
  Architecture architecture = Architecture::Decoder;
  int layers = 0;          // decoder layers (T5), or the only stack
  int encoder_layers = 0;  // T5 only
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;  // grouped-query attention when below heads
  int head_dim = 0;
  int ffn_hidden = 0;
  int vocab = 0;          // Vision: number of classes
  int seq_len = 0;        // reference sequence length (Vision: patches + class token)
  int max_positions = 0;  // learned position table size
  int token_types = 0;    // BERT segment embeddings
  NormKind norm = NormKind::LayerNorm;
  MlpKind mlp = MlpKind::Gelu;
  PositionKind position = PositionKind::Learned;
  bool post_norm = false;  // BERT: norm after the residual add
  bool biases = true;
  bool dropout = true;
  bool tied_embeddings = true;
  int patch_size = 0;  // Vision
  int channels = 0;    // Vision
  MoeConfig moe;
  double published_parameters = 0;  // the figure the model is known by
  double published_active_parameters = 0;
  std::string source;  // paper or model card giving the configuration
};

struct ModelOptions {
  bool flash_attention = false;  // fused attention: no s^2 tensors saved
  double microbatch_size = 1;    // reference shape of the stored times
  double seq_len = 0;            // 0: the model's own
  double activation_bytes = 2;   // bf16 activations and weights
};

std::span<const ModelConfig> model_zoo();
// By name, case-insensitively; throws Error listing the known names.
const ModelConfig& find_model(const std::string& name);

CostGraph build_model_graph(const ModelConfig& config, const HardwareProfile& hardware,
                            const ModelOptions& options = {});

}  // namespace flexpipe
