// Tests of the operator kind registry: every operator of the trainable models has one entry, chosen by
// its kind and role (not its name), whose output shape is what its operator computes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "builtin_model/operator_kinds.h"
#include "executor/model_plan.h"
#include "flexpipe/support/error.h"
#include "flexpipe/train/trainable_model.h"

namespace flexpipe::runtime {
namespace {

ModelPlan gpt_plan() {
  const ModelConfig config = gpt_config({2, 16, 4, 32, 8});
  return make_model_plan(config, partition_balanced(trainable_graph(config, 3), 1), 3, at::kDouble, 5);
}

// Grouped-query attention, rotary positions, RMSNorm and SwiGLU.
ModelPlan llama_plan() {
  const ModelConfig config = llama_config({2, 16, 4, 32, 8, ModelFamily::Llama, 2});
  return make_model_plan(config, partition_balanced(trainable_graph(config, 3), 1), 3, at::kDouble, 5);
}

TEST(OperatorKinds, EachKindAndRoleIsRegisteredOnce) {
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (const OperatorKind& k : operator_kinds()) {
    EXPECT_TRUE(seen.insert({k.kind, k.role}).second) << k.kind << " " << k.role;
    EXPECT_TRUE(k.make && k.output_shape && k.reference) << k.kind << " " << k.role;
  }
}

TEST(OperatorKinds, TheModelZooSaysTheRoleOfEveryLinearEmbeddingAndAttentionProduct) {
  for (const ModelPlan& plan : {gpt_plan(), llama_plan()})
    for (const OperatorNode& node : plan.graph.nodes) {
      if (node.kind == "linear" || node.kind == "embedding" || node.kind == "bmm") {
        EXPECT_FALSE(node.role.empty()) << node.name;
      }
      EXPECT_NO_THROW(operator_kind(node)) << node.name;
    }
}

TEST(OperatorKinds, EveryOutputShapeIsTheShapeItsOperatorComputes) {
  at::NoGradGuard no_grad;
  for (const ModelPlan& plan : {gpt_plan(), llama_plan()}) {
    const MicroBatchData data = make_batch(plan, 1, 0)[0];
    ChunkModule module = make_chunk_module(plan, 0);
    std::vector<at::Tensor> values(plan.graph.nodes.size());
    for (size_t v = 0; v < values.size(); ++v) {
      std::vector<at::Tensor> in;
      for (int p : plan.inputs[v]) in.push_back(values[p]);
      Saved saved;
      values[v] = module.op(static_cast<int>(v)).forward(in, data, saved);
      EXPECT_EQ(values[v].sizes().vec(), output_shape(plan, static_cast<int>(v))) << plan.graph.nodes[v].name;
    }
  }
}

TEST(OperatorKinds, TheRoleNotTheNameChoosesTheParameters) {
  ModelPlan plan = gpt_plan();
  const ChunkModule named = make_chunk_module(plan, 0);
  for (OperatorNode& node : plan.graph.nodes) node.name = "renamed." + node.name + ".x";
  const ChunkModule renamed = make_chunk_module(plan, 0);
  for (size_t v = 0; v < plan.graph.nodes.size(); ++v) {
    const auto &a = named.operators[v]->parameters(), &b = renamed.operators[v]->parameters();
    ASSERT_EQ(a.size(), b.size()) << plan.graph.nodes[v].name;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << plan.graph.nodes[v].name;
  }
}

TEST(OperatorKinds, AnOperatorWithoutAnEntryIsRefusedNamingItsKindAndRole) {
  OperatorNode node;
  node.name = "decoder.0.cross_q";
  node.kind = "linear";
  node.role = "cross_q";
  try {
    operator_kind(node);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "runtime: operator 'decoder.0.cross_q' of kind 'linear' (role 'cross_q') has no runtime implementation");
  }
  node.kind = "flash_attention";
  node.role.clear();
  EXPECT_THROW(operator_kind(node), Error);
}

}  // namespace
}  // namespace flexpipe::runtime
