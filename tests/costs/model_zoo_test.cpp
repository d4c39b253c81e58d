// The model zoo against published parameter counts, the Korthikanti activation formula and the
// Megatron FLOP formula; hardware profiles and lookups.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

const HardwareProfile& h100() { return find_hardware("H100-80GB"); }

CostGraph build(const std::string& name, ModelOptions options = {}) {
  return build_model_graph(find_model(name), h100(), options);
}

int layer_index(const CostGraph& graph, const std::string& name) {
  for (size_t l = 0; l < graph.layers.size(); ++l)
    if (graph.layers[l].name == name) return static_cast<int>(l);
  return -1;
}

double layer_saved_bytes(const CostGraph& graph, const std::string& layer, double b, double s) {
  const int index = layer_index(graph, layer);
  double total = 0;
  for (const OperatorNode& node : graph.nodes)
    if (node.layer == index) total += node.saved_bytes.at(b, s);
  return total;
}

double layer_matmul_flops(const CostGraph& graph, const std::string& layer, double b, double s) {
  const int index = layer_index(graph, layer);
  double total = 0;
  for (const OperatorNode& node : graph.nodes)
    if (node.layer == index && (node.kind == "linear" || node.kind == "bmm")) total += node.forward.flops.at(b, s);
  return total;
}

void expect_within(double value, double published, double tolerance) {
  EXPECT_NEAR(value / published, 1.0, tolerance) << value << " vs published " << published;
}

TEST(ModelZoo, ParameterCountsMatchPublishedFigures) {
  expect_within(total_parameters(build("gpt3-175b")), 175e9, 0.005);
  EXPECT_DOUBLE_EQ(total_parameters(build("llama2-7b")), 6738415616.0);  // the released checkpoint's count
  expect_within(total_parameters(build("bert-large")), 340e6, 0.015);
  const CostGraph mixtral = build("mixtral-8x7b");
  expect_within(total_parameters(mixtral), 46.7e9, 0.002);
  expect_within(total_active_parameters(mixtral), 12.9e9, 0.002);
  const CostGraph deepseek = build("deepseek-moe-16b");
  expect_within(total_parameters(deepseek), 16.4e9, 0.005);
  expect_within(total_active_parameters(deepseek), 2.8e9, 0.015);
}

TEST(ModelZoo, EveryModelIsWithinTwoPercentOfItsPublishedSizeExceptT5) {
  for (const ModelConfig& config : model_zoo()) {
    const CostGraph graph = build_model_graph(config, h100());
    // T5's "770M" counts a separate LM head; the released, tied checkpoint has 737.7M.
    const double tolerance = config.name == "t5-large" ? 0.05 : 0.02;
    SCOPED_TRACE(config.name);
    expect_within(total_parameters(graph), config.published_parameters, tolerance);
    expect_within(total_active_parameters(graph), config.published_active_parameters, tolerance);
  }
}

TEST(ModelZoo, DenseModelsUseEveryParameter) {
  const CostGraph graph = build("llama2-70b");
  EXPECT_EQ(total_parameters(graph), total_active_parameters(graph));
}

// Korthikanti et al. 2022, eq. (1): s*b*h*(34 + 5*a*s/h) bytes per layer without recompute, plus the
// two LayerNorms' fp32 mean and reciprocal std (16 bytes per token) that the paper leaves out.
TEST(ModelZoo, GptLayerActivationMemoryFollowsKorthikanti) {
  const CostGraph graph = build("gpt3-175b");
  const double h = 12288, a = 96;
  for (double b : {1.0, 4.0})
    for (double s : {2048.0, 512.0}) {
      const double formula = s * b * h * (34 + 5 * a * s / h) + 16 * s * b;
      EXPECT_EQ(layer_saved_bytes(graph, "layer.17", b, s), formula) << "b=" << b << " s=" << s;
    }
}

// With flash attention the s^2 term disappears; the log-sum-exp (fp32 per head and token) remains.
TEST(ModelZoo, FlashAttentionDropsTheQuadraticTerm) {
  const CostGraph graph = build("gpt3-13b", {.flash_attention = true});
  const double h = 5120, a = 40, b = 2, s = 2048;
  EXPECT_EQ(layer_saved_bytes(graph, "layer.0", b, s), s * b * h * 34 + 16 * s * b + 4 * a * s * b);
  for (const OperatorNode& node : graph.nodes) EXPECT_EQ(node.saved_bytes.per_token_seq, 0) << node.name;
}

// Without dropout the softmax and the P V product save the same probabilities: held once, the
// quadratic term is 2as^2b bytes (Korthikanti's softmax output alone) instead of 4as^2b.
TEST(ModelZoo, WithoutDropoutTheProbabilitiesAreSavedOnce) {
  const CostGraph llama = build("llama2-7b");
  const int softmax = find_node(llama, "layer.3.softmax"), weighted = find_node(llama, "layer.3.attention_v");
  ASSERT_EQ(weighted, softmax + 1);
  EXPECT_EQ(llama.nodes[weighted].shared_saved_bytes, llama.nodes[softmax].saved_bytes);
  double quadratic = 0;  // bytes per b*s^2, held once
  for (const OperatorNode& node : llama.nodes)
    if (node.layer == llama.nodes[softmax].layer)
      quadratic += node.saved_bytes.per_token_seq - node.shared_saved_bytes.per_token_seq;
  EXPECT_EQ(quadratic, 2 * 32);
  // With dropout the P V product saves the dropped-out copy: nothing is shared.
  for (const OperatorNode& node : build("gpt3-1.3b").nodes) EXPECT_TRUE(node.shared_saved_bytes.is_zero()) << node.name;
}

// Narayanan et al. 2021: a layer's forward is 24*b*s*h^2*(1 + s/(6h)) FLOPs of matrix products.
TEST(ModelZoo, LayerFlopsFollowMegatronFormula) {
  for (const char* name : {"gpt3-1.3b", "gpt3-175b"}) {
    const CostGraph graph = build(name);
    const ModelConfig& config = find_model(name);
    const double h = config.hidden, b = 2, s = 1024;
    EXPECT_EQ(layer_matmul_flops(graph, "layer.3", b, s), 24 * b * s * h * h * (1 + s / (6 * h))) << name;
    // The whole model: layers plus the LM head (2*b*s*h*V).
    double total = 0;
    for (const OperatorNode& node : graph.nodes)
      if (node.kind == "linear" || node.kind == "bmm") total += node.forward.flops.at(b, s);
    EXPECT_EQ(total, config.layers * 24 * b * s * h * h * (1 + s / (6 * h)) + 2 * b * s * h * config.vocab) << name;
  }
}

TEST(ModelZoo, BackwardFlopsAreTwiceTheForwardForMatrixProducts) {
  const CostGraph graph = build("gpt3-6.7b");
  for (const OperatorNode& node : graph.nodes) {
    if (node.kind == "linear") {
      EXPECT_EQ(node.backward_input.flops, node.forward.flops) << node.name;
      EXPECT_EQ(node.backward_weight.flops,
                node.forward.flops + per_token(node.parameters - node.forward.flops.per_token / 2))
          << node.name;
    }
    if (node.kind == "bmm") {
      EXPECT_EQ(node.backward_input.flops, 2 * node.forward.flops) << node.name;
    }
  }
}

TEST(ModelZoo, TimesAreTheRooflineOfFlopsAndBytes) {
  const CostGraph graph = build("llama2-7b");
  const HardwareProfile& hw = h100();
  const double flop_rate = hw.peak_flops * hw.efficiency / 1000, byte_rate = hw.hbm_bandwidth * hw.efficiency / 1000;
  const int qkv = find_node(graph, "layer.0.qkv");
  ASSERT_GE(qkv, 0);
  const OperatorNode& node = graph.nodes[qkv];
  // Fused Q, K, V projection of a 4096-wide model over 4096 tokens: compute bound.
  EXPECT_EQ(node.forward.flops.at(1, 4096), 2.0 * 4096 * 4096 * 3 * 4096);
  EXPECT_DOUBLE_EQ(node.forward.time, 2.0 * 4096 * 4096 * 3 * 4096 / flop_rate);
  const OperatorNode& softmax = graph.nodes[find_node(graph, "layer.0.softmax")];
  EXPECT_DOUBLE_EQ(softmax.forward.time, softmax.forward.bytes.at(1, 4096) / byte_rate);  // memory bound
}

TEST(ModelZoo, GroupedQueryAttentionShrinksKeysAndValues) {
  const CostGraph graph = build("llama2-70b");
  const OperatorNode& qkv = graph.nodes[find_node(graph, "layer.0.qkv")];
  EXPECT_EQ(qkv.parameters, 8192.0 * (64 + 2 * 8) * 128);
  const OperatorNode& fc1 = graph.nodes[find_node(graph, "layer.0.fc1")];
  EXPECT_EQ(fc1.parameters, 8192.0 * 2 * 28672);  // SwiGLU: gate and up fused
  EXPECT_EQ(graph.nodes[find_node(graph, "layer.0.ln1")].kind, "rmsnorm");
  EXPECT_GE(find_node(graph, "layer.0.rope"), 0);
}

TEST(ModelZoo, EmbeddingHeadAndLossAreIncluded) {
  const CostGraph graph = build("gpt3-175b");
  EXPECT_GT(graph.nodes.size(), 1000u);
  EXPECT_EQ(graph.layers.front().role, LayerRole::Embedding);
  EXPECT_EQ(graph.layers.back().role, LayerRole::Loss);
  const OperatorNode& head = graph.nodes[find_node(graph, "head.lm_head")];
  EXPECT_EQ(head.tied_to, find_node(graph, "embedding.word"));  // GPT-3 ties the LM head
  EXPECT_EQ(graph.nodes[find_node(graph, "head.loss")].saved_bytes.per_token, 4.0 * 50257);
  EXPECT_GE(find_node(graph, "head.final_norm"), 0);
  // Llama's head is its own parameters.
  const CostGraph llama = build("llama2-7b");
  EXPECT_EQ(llama.nodes[find_node(llama, "head.lm_head")].tied_to, kNotTied);
}

TEST(ModelZoo, ResidualStreamSkipsOverTheAttentionBlock) {
  const CostGraph graph = build("gpt3-1.3b");
  const int input = find_node(graph, "layer.0.ln1") - 1;  // the embedding's dropout
  const int residual = find_node(graph, "layer.0.residual1");
  bool found = false;
  for (const TensorEdge& edge : graph.edges) found |= edge.from == input && edge.to == residual;
  EXPECT_TRUE(found);
}

TEST(ModelZoo, T5DecoderLayersReadTheEncoderOutput) {
  const CostGraph graph = build("t5-large");
  const int encoder_output = find_node(graph, "encoder.23.final_norm");
  ASSERT_GE(encoder_output, 0);
  std::set<int> readers;
  for (const TensorEdge& edge : graph.edges)
    if (edge.from == encoder_output) readers.insert(edge.to);
  EXPECT_EQ(readers.size(), 24u);  // one cross_kv per decoder layer
  EXPECT_GE(find_node(graph, "decoder.5.cross_scores"), 0);
  // Encoder and decoder layers differ: the decoder adds cross-attention.
  auto count_in = [&](const std::string& layer) {
    const int index = layer_index(graph, layer);
    int count = 0;
    for (const OperatorNode& node : graph.nodes) count += node.layer == index;
    return count;
  };
  EXPECT_LT(count_in("encoder.3"), count_in("decoder.3"));
}

TEST(ModelZoo, DeepSeekKeepsItsFirstLayerDense) {
  const CostGraph graph = build("deepseek-moe-16b");
  EXPECT_EQ(find_node(graph, "layer.0.router"), -1);
  EXPECT_GE(find_node(graph, "layer.0.fc1"), 0);
  EXPECT_GE(find_node(graph, "layer.1.router"), 0);
  EXPECT_GE(find_node(graph, "layer.1.shared_fc1"), 0);
  const OperatorNode& experts = graph.nodes[find_node(graph, "layer.1.experts_fc1")];
  EXPECT_EQ(experts.parameters, 64.0 * 2048 * 2 * 1408);
  EXPECT_EQ(experts.active_parameters, 6.0 * 2048 * 2 * 1408);
}

TEST(ModelZoo, ReferenceShapeFollowsOptions) {
  const CostGraph graph = build("vit-h14", {.microbatch_size = 8, .seq_len = 0});
  EXPECT_EQ(graph.reference, (Shape{8, 257}));
  EXPECT_EQ(graph.hardware->name, "H100-80GB");
}

TEST(ModelZoo, UnknownNamesListTheKnownOnes) {
  try {
    find_model("gpt5");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()),
              "unknown model 'gpt5' (known: gpt3-1.3b, gpt3-2.7b, gpt3-6.7b, gpt3-13b, gpt3-175b, llama2-7b, "
              "llama2-13b, llama2-70b, llama3-8b, llama3-70b, bert-large, t5-large, vit-l16, vit-h14, mixtral-8x7b, "
              "deepseek-moe-16b)");
  }
  try {
    find_hardware("TPUv5");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()), "unknown hardware 'TPUv5' (known: A100-80GB, H100-80GB, H200-141GB)");
  }
  EXPECT_EQ(find_hardware("h200-141gb").name, "H200-141GB");
  EXPECT_EQ(find_model("Llama2-7B").name, "llama2-7b");
}

TEST(Hardware, RatesArePeakTimesEfficiencyPerMillisecond) {
  const HardwareProfile& a100 = find_hardware("A100-80GB");
  const RooflineRates rates = roofline_rates(a100);
  EXPECT_DOUBLE_EQ(rates.flop_rate, 312e12 * 0.5 / 1000);
  EXPECT_DOUBLE_EQ(rates.byte_rate, 2039e9 * 0.5 / 1000);
  EXPECT_DOUBLE_EQ(link_bandwidth_per_ms(a100, Interconnect::NvLink), 300e9 / 1000);
  EXPECT_DOUBLE_EQ(link_bandwidth_per_ms(find_hardware("H200-141GB"), Interconnect::Pcie), 64e9 / 1000);
  EXPECT_EQ(find_hardware("H200-141GB").memory_bytes, 141e9);
}

}  // namespace
}  // namespace flexpipe
