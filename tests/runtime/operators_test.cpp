// Every hand-written backward against libtorch's autograd, the I/W split against the fused
// backward, and one operator against numbers worked out by hand.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <string>
#include <vector>

#include "builtin_model/operators.h"
#include "builtin_model/reference_model.h"
#include "executor/model_plan.h"
#include "flexpipe/train/trainable_model.h"

namespace flexpipe::runtime {
namespace {

ModelPlan whole_model(at::ScalarType dtype, int layers = 2) {
  const ModelConfig config = gpt_config({layers, 16, 4, 32, 8});
  return make_model_plan(config, partition_balanced(trainable_graph(config, 3), 1), 3, dtype, 99);
}

// Llama's layout with grouped-query attention: 4 query heads share 2 key/value heads.
ModelPlan whole_llama(at::ScalarType dtype) {
  const ModelConfig config = llama_config({2, 16, 4, 32, 8, ModelFamily::Llama, 2});
  return make_model_plan(config, partition_balanced(trainable_graph(config, 3), 1), 3, dtype, 99);
}

// Forward through every operator, then the backward node by node: I for all, W when `split`,
// otherwise W right after each I. Returns the loss; gradients land in the module.
double manual_pass(const ModelPlan& plan, ChunkModule& module, const MicroBatchData& data, bool split) {
  at::NoGradGuard no_grad;
  const int n = static_cast<int>(plan.graph.nodes.size());
  std::vector<at::Tensor> values(n), grads(n);
  std::vector<Saved> saved(n);
  for (int v = 0; v < n; ++v) {
    std::vector<at::Tensor> in;
    for (int p : plan.inputs[v]) in.push_back(values[p]);
    values[v] = module.op(v).forward(in, data, saved[v]);
  }
  grads[n - 1] = at::ones({}, values[n - 1].options());
  std::vector<int> deferred;
  for (int v = n - 1; v >= 0; --v) {
    const std::vector<at::Tensor> in = module.op(v).backward_input(grads[v], saved[v]);
    for (size_t i = 0; i < in.size(); ++i) {
      at::Tensor& g = grads[plan.inputs[v][i]];
      g = g.defined() ? g + in[i] : in[i];
    }
    if (split)
      deferred.push_back(v);
    else
      module.op(v).backward_weight(grads[v], saved[v]);
  }
  for (int v : deferred) module.op(v).backward_weight(grads[v], saved[v]);
  return values[n - 1].item<double>();
}

// The loss and every parameter's gradient from the hand-written backwards against autograd through
// reference_loss (float64). Returns how many parameter tensors were compared.
int expect_gradients_equal_autograd(const ModelPlan& plan) {
  const MicroBatchData data = make_batch(plan, 1, 0)[0];
  ChunkModule module = make_chunk_module(plan, 0);
  const double loss = manual_pass(plan, module, data, false);

  std::vector<std::vector<at::Tensor>> params;
  for (size_t n = 0; n < plan.graph.nodes.size(); ++n) {
    params.push_back(initial_parameters(plan.graph, static_cast<int>(n), plan.shape, plan.seed, plan.dtype));
    for (at::Tensor& p : params.back()) p.requires_grad_(true);
  }
  const at::Tensor reference = reference_loss(plan, params, data);
  reference.backward();
  EXPECT_NEAR(loss, reference.item<double>(), 1e-14);
  int checked = 0;
  for (size_t n = 0; n < params.size(); ++n)
    for (size_t i = 0; i < params[n].size(); ++i) {
      const at::Tensor& mine = module.op(static_cast<int>(n)).gradients()[i];
      EXPECT_LT(relative_difference(mine, params[n][i].grad()), 1e-12) << plan.graph.nodes[n].name << "[" << i << "]";
      ++checked;
    }
  return checked;
}

// I for every operator then W for every operator gives the same loss and bit-identical gradients as
// W right after each I.
void expect_split_equals_fused(const ModelPlan& plan) {
  const MicroBatchData data = make_batch(plan, 1, 3)[0];
  ChunkModule fused = make_chunk_module(plan, 0), split = make_chunk_module(plan, 0);
  EXPECT_EQ(manual_pass(plan, fused, data, false), manual_pass(plan, split, data, true));
  for (size_t n = 0; n < plan.graph.nodes.size(); ++n)
    for (size_t i = 0; i < fused.operators[n]->gradients().size(); ++i)
      EXPECT_TRUE(at::equal(fused.operators[n]->gradients()[i], split.operators[n]->gradients()[i]))
          << plan.graph.nodes[n].name;
}

TEST(Operators, EveryGradientEqualsAutograd) {
  // Embeddings; per layer 2 norms x 2, 4 linears x 2; final norm x 2, LM head.
  EXPECT_EQ(expect_gradients_equal_autograd(whole_model(at::kDouble)), 2 + 2 * (2 + 4 + 2 + 4) + 2 + 1);
}

// RMSNorm, rotary positions, SwiGLU and grouped-query attention, no biases.
TEST(Operators, LlamaGradientsEqualAutograd) {
  const ModelPlan plan = whole_llama(at::kDouble);
  std::vector<std::string> kinds;
  for (int v = 0; v < 16; ++v) kinds.push_back(plan.graph.nodes[v].kind);
  EXPECT_EQ(kinds,
            (std::vector<std::string>{"embedding", "rmsnorm", "linear", "rope", "bmm", "softmax", "bmm", "linear",
                                      "add", "rmsnorm", "linear", "swiglu", "linear", "add", "rmsnorm", "linear"}));
  // Word embedding; per layer 2 norms, 4 linears; final norm, LM head.
  EXPECT_EQ(expect_gradients_equal_autograd(plan), 1 + 2 * (2 + 4) + 2);
}

TEST(Operators, LlamaSplitBackwardGivesBitIdenticalGradients) { expect_split_equals_fused(whole_llama(at::kFloat)); }

// Rotary positions by hand: head size 4 turns pairs (0, 2) by t and (1, 3) by t / 100 at position t.
TEST(Operators, RotaryPositionsByHand) {
  const ModelConfig config = llama_config({1, 4, 1, 8, 2, ModelFamily::Llama, 1});
  const ModelPlan plan = make_model_plan(config, partition_balanced(trainable_graph(config, 1), 1), 1, at::kDouble, 1);
  ChunkModule module = make_chunk_module(plan, 0);
  Operator& rope = module.op(3);
  ASSERT_EQ(rope.name(), "layer.0.rope");
  // Q = (1, 0, 0, 0), K = (0, 1, 0, 0), V = 7s at positions 0 and 1.
  at::Tensor qkv = at::full({1, 2, 12}, 7.0, at::kDouble);
  for (int t = 0; t < 2; ++t) {
    qkv[0][t].narrow(0, 0, 8).zero_();
    qkv[0][t][0] = 1;
    qkv[0][t][5] = 1;
  }
  Saved saved;
  const at::Tensor y = rope.forward({qkv}, {}, saved);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 2, 8}));
  EXPECT_DOUBLE_EQ(y[0][0][0].item<double>(), 1);  // position 0: unturned
  EXPECT_DOUBLE_EQ(y[0][0][2].item<double>(), 0);
  EXPECT_NEAR(y[0][1][0].item<double>(), std::cos(1.0), 1e-15);  // pair (0, 2) by 1 radian
  EXPECT_NEAR(y[0][1][2].item<double>(), std::sin(1.0), 1e-15);
  EXPECT_NEAR(y[0][1][5].item<double>(), std::cos(0.01), 1e-15);  // K's pair (1, 3) by 1 / 100
  EXPECT_NEAR(y[0][1][7].item<double>(), std::sin(0.01), 1e-15);
  // The backward turns the gradient back and gives V none.
  const at::Tensor dx = rope.backward_input(y, saved)[0];
  EXPECT_LT((dx.narrow(2, 0, 8) - qkv.narrow(2, 0, 8)).abs().max().item<double>(), 1e-15);
  EXPECT_EQ(dx.narrow(2, 8, 4).abs().sum().item<double>(), 0);
}

TEST(Operators, SplitBackwardGivesBitIdenticalGradients) { expect_split_equals_fused(whole_model(at::kFloat)); }

TEST(Operators, InputGradientLeavesParameterGradientsUntouched) {
  const ModelPlan plan = whole_model(at::kFloat, 1);
  ChunkModule module = make_chunk_module(plan, 0);
  Operator& qkv = module.op(4);
  ASSERT_EQ(qkv.name(), "layer.0.qkv");
  const at::Tensor x = at::randn({3, 8, 16});
  Saved saved;
  const at::Tensor y = qkv.forward({x}, {}, saved);
  qkv.backward_input(at::ones_like(y), saved);
  EXPECT_EQ(qkv.gradients()[0].abs().sum().item<double>(), 0.0);
  qkv.backward_weight(at::ones_like(y), saved);
  EXPECT_GT(qkv.gradients()[0].abs().sum().item<double>(), 0.0);
}

TEST(Operators, LinearByHand) {
  const ModelPlan plan = whole_model(at::kDouble, 1);
  ChunkModule module = make_chunk_module(plan, 0);
  Operator& proj = module.op(8);  // out_proj: 16 -> 16; use its top-left 2x2 corner only
  ASSERT_EQ(proj.name(), "layer.0.out_proj");
  proj.parameters()[0].zero_();
  proj.parameters()[1].zero_();
  proj.parameters()[0][0][0] = 1;  // W = [[1, 2], [3, 4]] in the corner
  proj.parameters()[0][0][1] = 2;
  proj.parameters()[0][1][0] = 3;
  proj.parameters()[0][1][1] = 4;
  proj.parameters()[1][0] = 0.5;
  at::Tensor x = at::zeros({1, 1, 16}, at::kDouble);
  x[0][0][0] = 1;
  x[0][0][1] = -1;
  Saved saved;
  const at::Tensor y = proj.forward({x}, {}, saved);
  EXPECT_DOUBLE_EQ(y[0][0][0].item<double>(), 1 * 1 + 2 * -1 + 0.5);  // -0.5
  EXPECT_DOUBLE_EQ(y[0][0][1].item<double>(), 3 * 1 + 4 * -1);        // -1
  at::Tensor dy = at::zeros({1, 1, 16}, at::kDouble);
  dy[0][0][0] = 1;
  dy[0][0][1] = 2;
  const at::Tensor dx = proj.backward_input(dy, saved)[0];
  EXPECT_DOUBLE_EQ(dx[0][0][0].item<double>(), 1 * 1 + 2 * 3);  // dy W, column 0
  EXPECT_DOUBLE_EQ(dx[0][0][1].item<double>(), 1 * 2 + 2 * 4);
  proj.backward_weight(dy, saved);
  const at::Tensor& dW = proj.gradients()[0];
  EXPECT_DOUBLE_EQ(dW[0][0].item<double>(), 1);   // dy_0 * x_0
  EXPECT_DOUBLE_EQ(dW[1][1].item<double>(), -2);  // dy_1 * x_1
  EXPECT_DOUBLE_EQ(proj.gradients()[1][1].item<double>(), 2);
}

TEST(Operators, SameSeedSameWeightsOnEveryRank) {
  const ModelPlan plan = whole_model(at::kFloat);
  const ChunkModule a = make_chunk_module(plan, 0), b = make_chunk_module(plan, 0);
  for (size_t n = 0; n < a.operators.size(); ++n)
    for (size_t i = 0; i < a.operators[n]->parameters().size(); ++i)
      EXPECT_TRUE(at::equal(a.operators[n]->parameters()[i], b.operators[n]->parameters()[i]));
  // Different nodes draw from different streams.
  EXPECT_FALSE(at::equal(a.operators[4]->parameters()[0].narrow(0, 0, 16), a.operators[8]->parameters()[0]));
}

}  // namespace
}  // namespace flexpipe::runtime
