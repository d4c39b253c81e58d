// The runtime's model description: the GPT graph's operator chain, what crosses each cut, and the
// balanced operator partition (checked against brute force).
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "flexpipe/support/error.h"
#include "flexpipe/train/trainable_model.h"

namespace flexpipe {
namespace {

CostGraph one_layer() { return trainable_graph(gpt_config({1, 8, 2, 16, 4}), 2); }

std::vector<std::string> names(const CostGraph& g) {
  std::vector<std::string> out;
  for (const OperatorNode& n : g.nodes) out.push_back(n.name);
  return out;
}

TEST(TrainableModel, GptIsTheOperatorChainTheIssueNames) {
  const CostGraph g = one_layer();
  EXPECT_EQ(names(g), (std::vector<std::string>{"embedding.word", "embedding.position", "embedding.sum", "layer.0.ln1",
                                                "layer.0.qkv", "layer.0.scores", "layer.0.softmax",
                                                "layer.0.attention_v", "layer.0.out_proj", "layer.0.residual1",
                                                "layer.0.ln2", "layer.0.fc1", "layer.0.act", "layer.0.fc2",
                                                "layer.0.residual2", "head.final_norm", "head.lm_head", "head.loss"}));
  // hidden 8: qkv 8x24 + 24, fc1 8x32 + 32; the head is not tied to the embedding.
  EXPECT_EQ(g.nodes[4].parameters, 8 * 24 + 24);
  EXPECT_EQ(g.nodes[11].parameters, 8 * 32 + 32);
  EXPECT_EQ(g.nodes[16].tied_to, kNotTied);
  EXPECT_EQ(g.nodes[16].parameters, 8 * 16);
}

TEST(TrainableModel, OperatorInputsPutTheProbabilitiesBeforeQkv) {
  const std::vector<std::vector<int>> inputs = operator_inputs(one_layer());
  EXPECT_EQ(inputs[2], (std::vector<int>{0, 1}));  // word + position
  EXPECT_EQ(inputs[5], (std::vector<int>{4}));     // scores <- qkv
  EXPECT_EQ(inputs[7], (std::vector<int>{6, 4}));  // attention_v <- softmax, qkv
  EXPECT_EQ(inputs[9], (std::vector<int>{2, 8}));  // residual1 <- stream, out_proj
  EXPECT_TRUE(inputs[0].empty());
}

TEST(TrainableModel, ACutInsideABlockSendsTheResidualStreamToo) {
  const CostGraph g = one_layer();
  const std::vector<int> sizes{4, 14};
  const auto crossing = boundary_tensors(g, partition_from_sizes(g, sizes));
  ASSERT_EQ(crossing.size(), 2u);
  EXPECT_TRUE(crossing[0].empty());
  EXPECT_EQ(crossing[1], (std::vector<int>{2, 3}));  // the stream (for residual1) and ln1's output
}

TEST(TrainableModel, TensorsTravelThroughAChunkThatDoesNotReadThem) {
  const CostGraph g = one_layer();
  const std::vector<int> sizes{4, 3, 11};  // [0,4) [4,7) [7,18)
  const Partition partition = partition_from_sizes(g, sizes);
  const auto crossing = boundary_tensors(g, partition);
  EXPECT_EQ(crossing[1], (std::vector<int>{2, 3}));
  EXPECT_EQ(crossing[2], (std::vector<int>{2, 4, 6}));  // the stream is relayed by chunk 1
  EXPECT_EQ(chunk_starts(partition), (std::vector<int>{0, 4, 7, 18}));
}

TEST(TrainableModel, ACutAtALayerBoundarySendsOneTensor) {
  const CostGraph g = trainable_graph(gpt_config({2, 8, 2, 16, 4}), 1);
  const std::vector<int> sizes{15, 15};  // embedding + layer 0 | layer 1 + head
  EXPECT_EQ(boundary_tensors(g, partition_from_sizes(g, sizes))[1], (std::vector<int>{14}));
}

double largest_stage(const CostGraph& g, const std::vector<int>& starts) {
  double worst = 0;
  for (size_t k = 0; k + 1 < starts.size(); ++k) {
    double t = 0;
    for (int n = starts[k]; n < starts[k + 1]; ++n)
      for (Pass pass : {Pass::Forward, Pass::BackwardInput, Pass::BackwardWeight})
        t += operator_time(g, g.nodes[n], pass, g.reference);
    worst = std::max(worst, t);
  }
  return worst;
}

TEST(TrainableModel, BalancedPartitionIsOptimalAgainstBruteForce) {
  const CostGraph g = one_layer();
  const int n = static_cast<int>(g.nodes.size());
  for (int stages = 1; stages <= 3; ++stages) {
    const Partition p = partition_balanced(g, stages);
    const std::vector<int> starts = chunk_starts(p);
    for (int k = 0; k < stages; ++k) EXPECT_LT(starts[k], starts[k + 1]) << "chunk " << k << " is empty";
    double best = std::numeric_limits<double>::infinity();
    if (stages == 1) best = largest_stage(g, {0, n});
    for (int a = 1; stages >= 2 && a < n; ++a) {
      if (stages == 2) best = std::min(best, largest_stage(g, {0, a, n}));
      for (int b = a + 1; stages == 3 && b < n; ++b) best = std::min(best, largest_stage(g, {0, a, b, n}));
    }
    EXPECT_DOUBLE_EQ(largest_stage(g, starts), best) << stages << " stages";
  }
}

TEST(TrainableModel, ImpossibleRequestsAreRefused) {
  const CostGraph g = one_layer();
  EXPECT_THROW(partition_balanced(g, 19), Error);
  EXPECT_THROW(partition_balanced(g, 0), Error);
  EXPECT_THROW(gpt_config({1, 10, 4, 16, 4}), Error);               // 10 is not a multiple of 4 heads
  EXPECT_THROW(require_trainable(find_model("gpt3-1.3b")), Error);  // dropout, tied head
  EXPECT_NO_THROW(require_trainable(find_model("llama2-7b")));
  EXPECT_NO_THROW(require_trainable(find_model("llama3-8b")));  // 32 query heads on 8 key/value heads
  auto refusal = [](const char* model) {
    try {
      require_trainable(find_model(model));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("trainable");
  };
  EXPECT_EQ(refusal("mixtral-8x7b"), "model mixtral-8x7b cannot be trained by the runtime: mixture-of-experts layers");
  EXPECT_EQ(refusal("t5-large"),
            "model t5-large cannot be trained by the runtime: only decoder models are trainable; a ReLU MLP (GeLU or "
            "SwiGLU only); relative position biases; dropout (runs must be deterministic); an LM head tied to the "
            "embedding");
  auto message = [](auto&& make) {
    try {
      make();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message([] {
              llama_config({1, 16, 4, 16, 4, ModelFamily::Llama, 3});
            }),
            "Llama size: 3 key/value heads do not divide 4 heads");
  EXPECT_EQ(message([] {
              llama_config({1, 12, 4, 16, 4, ModelFamily::Llama, 0});
            }),
            "Llama size: rotary positions turn pairs, so the head size (hidden 12 / heads 4) must be even");
  EXPECT_EQ(message([] { model_family("mamba"); }), "unknown model family 'mamba' (known: gpt, llama)");
}

TEST(TrainableModel, LlamaIsTheOperatorChainOfItsLayout) {
  const ModelConfig config = llama_config({1, 16, 4, 16, 4, ModelFamily::Llama, 2});
  EXPECT_EQ(config.kv_heads, 2);
  EXPECT_EQ(config.ffn_hidden, 48);  // 8/3 x 16 = 42.7, up to a multiple of 8
  const CostGraph g = trainable_graph(config, 2);
  EXPECT_EQ(names(g),
            (std::vector<std::string>{"embedding.word", "layer.0.ln1", "layer.0.qkv", "layer.0.rope", "layer.0.scores",
                                      "layer.0.softmax", "layer.0.attention_v", "layer.0.out_proj", "layer.0.residual1",
                                      "layer.0.ln2", "layer.0.fc1", "layer.0.act", "layer.0.fc2", "layer.0.residual2",
                                      "head.final_norm", "head.lm_head", "head.loss"}));
  // No biases: qkv makes 4 query and 2 x 2 key/value heads of 4; fc1 the gate and the value.
  EXPECT_EQ(g.nodes[2].parameters, 16 * (4 + 2 * 2) * 4);
  EXPECT_EQ(g.nodes[10].parameters, 16 * 2 * 48);
  const std::vector<std::vector<int>> inputs = operator_inputs(g);
  EXPECT_EQ(inputs[4], (std::vector<int>{3}));     // scores <- rope
  EXPECT_EQ(inputs[6], (std::vector<int>{5, 2}));  // attention_v <- softmax, qkv
  EXPECT_EQ(trainable_config({1, 16, 4, 16, 4, ModelFamily::Llama, 2}).name, config.name);
}

}  // namespace
}  // namespace flexpipe
