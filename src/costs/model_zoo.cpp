// The configurations of the model zoo, each as its paper or model card gives it.
#include "flexpipe/costs/model_zoo.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

constexpr double kMillion = 1e6;
constexpr double kBillion = 1e9;

// What every configuration states: its shape. Attention is multi-head (kv_heads = heads) and
// head_dim = hidden / heads unless the family says otherwise.
ModelConfig transformer(const char* name, std::string description, Architecture architecture, int layers, int hidden,
                        int heads, int ffn_hidden) {
  ModelConfig c;
  c.name = name;
  c.description = std::move(description);
  c.architecture = architecture;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = c.kv_heads = heads;
  c.head_dim = hidden / heads;
  c.ffn_hidden = ffn_hidden;
  return c;
}

// GPT-3 (Brown et al. 2020, Table 2.1): pre-LayerNorm, learned positions, GeLU, biases, dropout,
// LM head tied to the word embedding. 13B uses hidden 5120 (Megatron's rounding of the paper's 5140).
ModelConfig gpt3(const char* name, int layers, int hidden, int heads, double published) {
  ModelConfig c = transformer(name, fmt::format("GPT-3 {} layers, hidden {}, {} heads", layers, hidden, heads),
                              Architecture::Decoder, layers, hidden, heads, 4 * hidden);
  c.vocab = 50257;
  c.seq_len = c.max_positions = 2048;
  c.published_parameters = c.published_active_parameters = published;
  c.source = "Brown et al. 2020, Language Models are Few-Shot Learners, Table 2.1";
  return c;
}

// Llama (Touvron et al. 2023; Meta Llama 3 model card): RMSNorm, rotary positions, SwiGLU, no biases,
// no dropout, untied LM head, grouped-query attention where kv_heads < heads.
ModelConfig llama(const char* name, int layers, int hidden, int heads, int kv_heads, int ffn, int vocab, int seq,
                  double published, const char* source) {
  ModelConfig c = transformer(name,
                              fmt::format("Llama {} layers, hidden {}, {} heads ({} KV), SwiGLU {}", layers, hidden,
                                          heads, kv_heads, ffn),
                              Architecture::Decoder, layers, hidden, heads, ffn);
  c.kv_heads = kv_heads;
  c.vocab = vocab;
  c.seq_len = seq;
  c.norm = NormKind::RmsNorm;
  c.mlp = MlpKind::SwiGlu;
  c.position = PositionKind::Rotary;
  c.biases = c.dropout = c.tied_embeddings = false;
  c.published_parameters = c.published_active_parameters = published;
  c.source = source;
  return c;
}

ModelConfig bert_large() {
  ModelConfig c =
      transformer("bert-large", "BERT-large: 24 post-LN encoder layers, hidden 1024, 16 heads, MLM + NSP heads",
                  Architecture::EncoderOnly, 24, 1024, 16, 4096);
  c.vocab = 30522;
  c.seq_len = c.max_positions = 512;
  c.token_types = 2;
  c.post_norm = true;
  c.published_parameters = c.published_active_parameters = 340 * kMillion;
  c.source = "Devlin et al. 2019, BERT, Section 3 (BERT-LARGE: L=24, H=1024, A=16, 340M)";
  return c;
}

ModelConfig t5_large() {
  ModelConfig c =
      transformer("t5-large", "T5-large: 24 encoder + 24 decoder layers, d_model 1024, 16 heads, ReLU FFN 4096",
                  Architecture::EncoderDecoder, 24, 1024, 16, 4096);
  c.encoder_layers = 24;
  c.vocab = 32128;
  c.seq_len = 512;
  c.norm = NormKind::RmsNorm;
  c.mlp = MlpKind::Relu;
  c.position = PositionKind::RelativeBias;
  c.biases = false;
  c.published_parameters = c.published_active_parameters = 770 * kMillion;
  c.source = "Raffel et al. 2020, T5, Section 3.7 (Large: 24+24 layers, d_model 1024, d_ff 4096, 16 heads; ~770M)";
  return c;
}

// ViT (Dosovitskiy et al. 2021, Table 1) at 224x224 pixels: (224/p)^2 patches plus the class token.
ModelConfig vit(const char* name, int layers, int hidden, int heads, int mlp, int patch, double published) {
  ModelConfig c = transformer(name,
                              fmt::format("ViT {} layers, hidden {}, {} heads, patch {} at 224x224, 1000 classes",
                                          layers, hidden, heads, patch),
                              Architecture::Vision, layers, hidden, heads, mlp);
  c.vocab = 1000;
  c.seq_len = c.max_positions = (224 / patch) * (224 / patch) + 1;
  c.patch_size = patch;
  c.channels = 3;
  c.tied_embeddings = false;
  c.published_parameters = c.published_active_parameters = published;
  c.source = "Dosovitskiy et al. 2021, An Image is Worth 16x16 Words, Table 1";
  return c;
}

ModelConfig mixtral() {
  ModelConfig c = llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, 46.7 * kBillion,
                        "Jiang et al. 2024, Mixtral of Experts (8 experts, top-2, 46.7B total, 12.9B active)");
  c.description = "Mixtral-8x7B-like: 32 layers, hidden 4096, GQA 32/8, 8 SwiGLU experts of 14336, top-2";
  c.moe = {8, 2, 14336, 0, 0};
  c.published_active_parameters = 12.9 * kBillion;
  return c;
}

ModelConfig deepseek_moe() {
  ModelConfig c = llama("deepseek-moe-16b", 28, 2048, 16, 16, 10944, 102400, 4096, 16.4 * kBillion,
                        "Dai et al. 2024, DeepSeekMoE (16B: 64 routed experts of 1408, top-6, 2 shared, first layer "
                        "dense; 16.4B total, 2.8B active)");
  c.description =
      "DeepSeek-like MoE: 28 layers, hidden 2048, first layer dense (10944), then 2 shared + 64 routed "
      "experts of 1408, top-6";
  c.moe = {64, 6, 1408, 2, 1};
  c.published_active_parameters = 2.8 * kBillion;
  return c;
}

std::vector<ModelConfig> make_zoo() {
  return {
      gpt3("gpt3-1.3b", 24, 2048, 16, 1.3 * kBillion),
      gpt3("gpt3-2.7b", 32, 2560, 32, 2.7 * kBillion),
      gpt3("gpt3-6.7b", 32, 4096, 32, 6.7 * kBillion),
      gpt3("gpt3-13b", 40, 5120, 40, 13 * kBillion),
      gpt3("gpt3-175b", 96, 12288, 96, 175 * kBillion),
      llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 6.74 * kBillion,
            "Touvron et al. 2023, Llama 2, Table 1 and the released configuration"),
      llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 13.0 * kBillion,
            "Touvron et al. 2023, Llama 2, Table 1 and the released configuration"),
      llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 70 * kBillion,
            "Touvron et al. 2023, Llama 2, Table 1 and the released configuration (GQA, 8 KV heads)"),
      llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 8.0 * kBillion,
            "Meta Llama 3 model card and released configuration"),
      llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 70.6 * kBillion,
            "Meta Llama 3 model card and released configuration"),
      bert_large(),
      t5_large(),
      vit("vit-l16", 24, 1024, 16, 4096, 16, 307 * kMillion),
      vit("vit-h14", 32, 1280, 16, 5120, 14, 632 * kMillion),
      mixtral(),
      deepseek_moe(),
  };
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

}  // namespace

std::span<const ModelConfig> model_zoo() {
  static const std::vector<ModelConfig> zoo = make_zoo();
  return zoo;
}

const ModelConfig& find_model(const std::string& name) {
  const std::string wanted = lowercase(name);
  for (const ModelConfig& config : model_zoo())
    if (config.name == wanted) return config;
  std::string known;
  for (const ModelConfig& config : model_zoo()) known += fmt::format("{}{}", known.empty() ? "" : ", ", config.name);
  throw Error(fmt::format("unknown model '{}' (known: {})", name, known));
}

}  // namespace flexpipe
