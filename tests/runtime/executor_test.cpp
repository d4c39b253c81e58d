// The executor with every rank as a thread over the in-process transport: exactness against the
// autograd reference for cuts inside blocks, relayed tensors, recompute, offload, custom operations
// and float32, and the errors raised before any communication.
#include <gtest/gtest.h>

#include <thread>

#include <ATen/ATen.h>

#include "builtin_model/reference_model.h"
#include "executor/executor.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/ir/memory_actions.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/error.h"
#include "flexpipe/train/trainable_model.h"

namespace flexpipe::runtime {
namespace {

const ModelSize kSize{2, 16, 4, 32, 8};

ModelPlan plan_for(const Partition& partition, at::ScalarType dtype = at::kDouble) {
  return make_model_plan(gpt_config(kSize), partition, 2, dtype, 5);
}
Partition balanced(int chunks) { return partition_balanced(trainable_graph(gpt_config(kSize), 2), chunks); }
Partition sizes(std::vector<int> counts) { return partition_from_sizes(trainable_graph(gpt_config(kSize), 2), counts); }

struct RankResult {
  std::vector<StepReport> steps;
  std::vector<std::pair<int, std::vector<at::Tensor>>> parameters;  // (node, tensors) of every local stage
  std::string error;
};

std::vector<RankResult> train(const Schedule& schedule, const ModelPlan& plan, int steps, const OptimizerConfig& opt,
                              const HookRegistry& hooks = {}, const std::vector<MemoryDecision>& decisions = {},
                              const std::vector<char>& offload_checkpoints = {}) {
  auto transports = make_local_transports(schedule.num_devices);
  std::vector<RankResult> results(schedule.num_devices);
  std::vector<std::thread> threads;
  for (int r = 0; r < schedule.num_devices; ++r)
    threads.emplace_back([&, r] {
      try {
        ExecutorOptions options;
        options.optimizer = opt;
        options.timeout = std::chrono::milliseconds(20000);
        options.memory_decisions = decisions;
        options.offload_checkpoints = offload_checkpoints;
        Executor executor(schedule, plan, *transports[r], hooks, options);
        for (int step = 0; step < steps; ++step)
          results[r].steps.push_back(executor.run_step(step, make_batch(plan, schedule.num_microbatches, step)));
        for (int stage : executor.local_stages())
          for (auto& entry : executor.stage_parameters(stage)) results[r].parameters.push_back(entry);
      } catch (const std::exception& e) {
        results[r].error = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return results;
}

// Largest relative difference of losses and parameters against the single-process reference.
double difference(const std::vector<RankResult>& results, const ModelPlan& plan, int microbatches, int steps,
                  const OptimizerConfig& opt) {
  const ReferenceRun ref = train_reference(plan, microbatches, steps, opt);
  double worst = 0;
  for (const RankResult& r : results) {
    EXPECT_EQ(r.error, "");
    for (int step = 0; step < static_cast<int>(r.steps.size()); ++step)
      worst = std::max(worst, std::abs(r.steps[step].loss - ref.losses[step]) / std::abs(ref.losses[step]));
    for (const auto& [node, tensors] : r.parameters)
      for (size_t i = 0; i < tensors.size(); ++i)
        worst = std::max(worst, relative_difference(tensors[i], ref.parameters[node][i]));
  }
  return worst;
}

Schedule data_schedule(const std::string& name) {
  return load_schedule(std::string(FLEXPIPE_TEST_DATA) + "/runtime/" + name, {}, {});
}
// OFFLOAD, RELOAD, R, a stage-wide custom operation and OPT in one schedule.
Schedule example_schedule() {
  return load_schedule(std::string(FLEXPIPE_TEST_DATA) + "/../../examples/offload-1f1b-2dev.json", {}, {});
}

OptimizerConfig adamw() { return {"adamw", 1e-2, 0.01}; }

TEST(Executor, CutInsideABlockIsExact) {
  const Schedule schedule = make_builtin("1f1b", {2, 4});
  const ModelPlan plan = plan_for(sizes({4, 26}));  // cut after ln1: the residual crosses too
  ASSERT_EQ(plan.crossing[1].size(), 2u);
  const auto results = train(schedule, plan, 2, adamw());
  EXPECT_LT(difference(results, plan, 4, 2, adamw()), 1e-9);
  // The comparison does see a difference when there is one: another learning rate.
  EXPECT_GT(difference(results, plan, 4, 2, {"adamw", 2e-2, 0.01}), 1e-3);
}

TEST(Executor, RelayedTensorsAreExact) {
  const Schedule schedule = compile_builtin("zb-h1", {3, 6, 0}).schedule;
  const ModelPlan plan = plan_for(sizes({4, 3, 23}));  // chunk 1 relays the residual stream
  ASSERT_EQ(plan.crossing[2].size(), 3u);
  EXPECT_LT(difference(train(schedule, plan, 2, adamw()), plan, 6, 2, adamw()), 1e-9);
}

TEST(Executor, VPlacementHandsOverLocally) {
  const Schedule schedule = compile_builtin("zb-v", {2, 4, 0}).schedule;
  const ModelPlan plan = plan_for(balanced(4));
  EXPECT_LT(difference(train(schedule, plan, 2, adamw()), plan, 4, 2, adamw()), 1e-9);
}

TEST(Executor, DualPipeReplicasStayIdentical) {
  const Schedule schedule = compile_builtin("dualpipe", {2, 4, 0}).schedule;
  const ModelPlan plan = plan_for(balanced(2));
  const auto results = train(schedule, plan, 2, adamw());
  EXPECT_LT(difference(results, plan, 4, 2, adamw()), 1e-9);
  // Rank 0 holds chunk 0 of pipeline 0 and chunk 1 of pipeline 1; rank 1 the other copies.
  for (const auto& [node, tensors] : results[0].parameters)
    for (const auto& [other_node, other] : results[1].parameters)
      if (node == other_node) {
        for (size_t i = 0; i < tensors.size(); ++i) EXPECT_TRUE(at::equal(tensors[i], other[i]));
      }
}

TEST(Executor, RecomputeOffloadAndCustomOperationsAreExact) {
  const Schedule schedule = example_schedule();
  const ModelPlan plan = plan_for(balanced(2));
  HookRegistry hooks;
  int calls = 0;
  hooks.add("GRAD_ALLREDUCE", [&](const HookContext& c) {
    EXPECT_EQ(c.microbatch, -1);
    ++calls;
  });
  const auto results = train(schedule, plan, 2, adamw(), hooks);
  EXPECT_LT(difference(results, plan, 3, 2, adamw()), 1e-9);
  EXPECT_EQ(calls, 2 * 2);  // once per stage per step
  EXPECT_GT(results[0].steps[1].peak_offloaded_bytes, 0);
  EXPECT_EQ(results[1].steps[1].peak_offloaded_bytes, 0);
}

TEST(Executor, RecomputeLowersThePeakOfSavedActivations) {
  // 1F1B on 2 ranks, 3 micro-batches: stage 0 holds two micro-batches' activations at its peak;
  // recomputing every micro-batch keeps only the layers' inputs and rebuilds one layer at a time.
  const Schedule plain = data_schedule("1f1b-2dev.json");
  const Schedule recompute = data_schedule("1f1b-2dev-recompute.json");
  const ModelPlan plan = plan_for(balanced(2));
  const auto a = train(plain, plan, 1, adamw()), b = train(recompute, plan, 1, adamw());
  EXPECT_GT(b[0].steps[0].peak_saved_bytes, 0);
  EXPECT_LT(b[0].steps[0].peak_saved_bytes, a[0].steps[0].peak_saved_bytes);
  EXPECT_EQ(a[1].steps[0].peak_saved_bytes, b[1].steps[0].peak_saved_bytes);  // stage 1 is unchanged
  EXPECT_LT(difference(b, plan, 3, 1, adamw()), 1e-9);
}

// Per-operator decisions for the 30 nodes of kSize's graph (0-2 embeddings, 3-14 and 15-26 the two
// blocks: ln1 qkv scores softmax attention_v out_proj residual1 ln2 fc1 act fc2 residual2, 27-29 the
// head). Recompute chains inside blocks (ln1 <- sum, scores -> softmax -> attention_v, fc1 -> act),
// reading kept, offloaded and recomputed producers and stage inputs; offloads and keeps in between.
std::vector<MemoryDecision> mixed_decisions() {
  constexpr MemoryDecision K = MemoryDecision::Keep, R = MemoryDecision::Recompute, O = MemoryDecision::Offload;
  return {K, K, R,                             // word, position, sum (reads two kept embeddings)
          R, O, R, R, R, K, K, O, R, R, O, K,  // block 0
          R, R, K, O, R, K, K, K, O, K, R, K,  // block 1: attention_v reads an offloaded softmax
          R, R, R};                            // final norm, head and loss
}

constexpr int kNodes = 30;

std::vector<char> flags(int stages, char value) { return std::vector<char>(stages, value); }

TEST(Executor, PerOperatorMemoryDecisionsAreExact) {
  ASSERT_EQ(trainable_graph(gpt_config(kSize), 2).nodes.size(), static_cast<size_t>(kNodes));
  struct Case {
    Schedule schedule;
    Partition partition;
  };
  const std::vector<Case> cases = {
      // 2 stages cut after scores: softmax recomputes from a stage input, attention_v reads qkv from it.
      {add_memory_actions(make_builtin("1f1b", {2, 4}), flags(2, 1), flags(2, 1)), sizes({6, 24})},
      // 3 stages, split backward: W runs after I on what R rebuilt; one stage only offloads.
      {add_memory_actions(compile_builtin("zb-h1", {3, 6, 0}).schedule, {1, 1, 0}, {0, 1, 1}), sizes({6, 10, 14})},
      // 3 stages, 1F1B, everything flagged; the cut after ln1 sends the residual too.
      {add_memory_actions(make_builtin("1f1b", {3, 6}), flags(3, 1), flags(3, 1)), sizes({4, 12, 14})},
      // DualPipe: two copies of each chunk, OVERLAP_F_B units with R before and OFFLOAD after them.
      {add_memory_actions(compile_builtin("dualpipe", {2, 4, 0}).schedule, flags(4, 1), flags(4, 1)), sizes({6, 24})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schedule.name + " " + std::to_string(c.schedule.num_devices));
    const ModelPlan plan = plan_for(c.partition);
    const int m = c.schedule.num_microbatches;
    const auto results = train(c.schedule, plan, 2, adamw(), {}, mixed_decisions());
    EXPECT_LT(difference(results, plan, m, 2, adamw()), 1e-12);
    for (const RankResult& r : results) EXPECT_GT(r.steps[1].peak_saved_bytes, 0);
  }
}

// Llama's layout (RMSNorm, rotary positions, SwiGLU, 4 query heads on 2 key/value heads). The cut
// after the rotation sends the rotated Q and K, the fused projection (for V) and the residual
// stream; a split backward with recompute on two stages and offload on two.
TEST(Executor, LlamaWithGroupedQueryAttentionIsExact) {
  const ModelConfig config = llama_config({2, 16, 4, 32, 8, ModelFamily::Llama, 2});
  const Partition partition = partition_from_sizes(trainable_graph(config, 2), std::vector<int>{4, 10, 16});
  const ModelPlan plan = make_model_plan(config, partition, 2, at::kDouble, 5);
  EXPECT_EQ(plan.crossing[1], (std::vector<int>{0, 2, 3}));  // the stream, qkv, rope
  const Schedule schedule = add_memory_actions(compile_builtin("zb-h1", {3, 6, 0}).schedule, {1, 1, 0}, {0, 1, 1});
  const auto results = train(schedule, plan, 2, adamw());
  EXPECT_LT(difference(results, plan, 6, 2, adamw()), 1e-9);
}

TEST(Executor, PartialRecomputeHoldsBetweenKeepingAndRecomputingEverything) {
  // 1F1B on 2 ranks, 4 micro-batches: stage 0 (nodes 0-14) holds two micro-batches at its peak.
  const Schedule plain = make_builtin("1f1b", {2, 4});
  const Schedule recompute = add_memory_actions(plain, {1, 0}, {0, 0});
  const ModelPlan plan = plan_for(sizes({15, 15}));
  const auto keep_all = train(plain, plan, 1, adamw());
  const auto recompute_all = train(recompute, plan, 1, adamw());
  const auto partial = train(recompute, plan, 1, adamw(), {}, mixed_decisions());
  const int64_t keep = keep_all[0].steps[0].peak_saved_bytes, all = recompute_all[0].steps[0].peak_saved_bytes,
                part = partial[0].steps[0].peak_saved_bytes;
  EXPECT_LT(all, part);
  EXPECT_LT(part, keep);
  EXPECT_EQ(partial[1].steps[0].peak_saved_bytes, keep_all[1].steps[0].peak_saved_bytes);  // no R on stage 1
  EXPECT_LT(difference(partial, plan, 4, 1, adamw()), 1e-12);
  EXPECT_LT(difference(recompute_all, plan, 4, 1, adamw()), 1e-12);
}

TEST(Executor, WholeBackwardRebuildsOneLayerAtATime) {
  // 1F1B on 2 ranks, 4 micro-batches; stage 0 holds the embedding and both blocks. Rebuilt all at
  // once, a micro-batch would hold all three layers at the peak, half of keeping two micro-batches;
  // rebuilt layer by layer it holds one block plus the layers' inputs, well under that.
  const Schedule plain = make_builtin("1f1b", {2, 4});
  const Schedule recompute = add_memory_actions(plain, {1, 0}, {0, 0});
  const ModelPlan plan = plan_for(sizes({27, 3}));
  const auto keep_all = train(plain, plan, 1, adamw());
  const auto recompute_all = train(recompute, plan, 1, adamw());
  EXPECT_LT(2 * recompute_all[0].steps[0].peak_saved_bytes, keep_all[0].steps[0].peak_saved_bytes);
  EXPECT_LT(difference(recompute_all, plan, 4, 1, adamw()), 1e-12);
}

TEST(Executor, OffloadMovesOnlyTheOperatorsDecidedOffload) {
  // 1F1B on 2 ranks with OFFLOAD/RELOAD on stage 0 (nodes 0-14): each RELOAD comes one compute action
  // ahead of its backward, so one micro-batch is on the host at a time.
  const Schedule schedule = add_memory_actions(make_builtin("1f1b", {2, 4}), {0, 0}, {1, 0});
  const ModelPlan plan = plan_for(sizes({15, 15}));
  std::vector<MemoryDecision> decisions(kNodes, MemoryDecision::Keep);
  decisions[4] = decisions[11] = MemoryDecision::Offload;  // layer 0's qkv and fc1
  decisions[20] = MemoryDecision::Offload;                 // on stage 1, which has no OFFLOAD: kept
  const auto some = train(schedule, plan, 2, adamw(), {}, decisions);
  // qkv and fc1 are linear layers: each saves its input, [micro-batch 2, sequence 8, hidden 16] in
  // float64.
  const int64_t linear_input = 2 * 8 * 16 * 8;
  for (const StepReport& step : some[0].steps) EXPECT_EQ(step.peak_offloaded_bytes, 2 * linear_input);
  for (const StepReport& step : some[1].steps) EXPECT_EQ(step.peak_offloaded_bytes, 0);
  EXPECT_LT(difference(some, plan, 4, 2, adamw()), 1e-12);
  // Without decisions OFFLOAD moves everything stage 0 saved, and leaves nothing saved on the device
  // between OFFLOAD and RELOAD.
  const auto all = train(schedule, plan, 1, adamw());
  const auto keep = train(make_builtin("1f1b", {2, 4}), plan, 1, adamw());
  EXPECT_GT(all[0].steps[0].peak_offloaded_bytes, 2 * linear_input);
  EXPECT_EQ(2 * all[0].steps[0].peak_offloaded_bytes, keep[0].steps[0].peak_saved_bytes);
}

TEST(Executor, ATensorTwoOperatorsSaveMovesAndCountsOnce) {
  // Layer 0's softmax (node 6) and P V (node 7) both save the probabilities, [2, 4 heads, 8, 8] in
  // float64; P V saves the fused QKV [2, 8, 48] besides. Offloaded together, the probabilities move
  // once (one micro-batch on the host at a time, as above).
  const Schedule schedule = add_memory_actions(make_builtin("1f1b", {2, 4}), {0, 0}, {1, 0});
  const ModelPlan plan = plan_for(sizes({15, 15}));
  ASSERT_EQ(plan.graph.nodes[6].kind, "softmax");
  std::vector<MemoryDecision> decisions(kNodes, MemoryDecision::Keep);
  decisions[6] = decisions[7] = MemoryDecision::Offload;
  const auto moved = train(schedule, plan, 1, adamw(), {}, decisions);
  const int64_t probabilities = 2 * 4 * 8 * 8 * 8, qkv = 2 * 8 * 48 * 8;
  EXPECT_EQ(moved[0].steps[0].peak_offloaded_bytes, probabilities + qkv);
  EXPECT_LT(difference(moved, plan, 4, 1, adamw()), 1e-12);
}

TEST(Executor, OffloadedCheckpointsComeBackForTheRebuild) {
  // 1F1B on 2 ranks, both stages recomputed whole. Stage 0 (the embedding layer and block 0)
  // rebuilds block 0 from one checkpoint, the embeddings' sum [2, 8, 16] in float64; stage 1 rebuilds
  // block 1 from its received inputs and the head from block 1's output. With checkpoint offload,
  // OFFLOAD moves them to the host after F and RELOAD brings them back right before R. Stage 0 holds
  // two micro-batches at its peak, so two are on the host at once; stage 1 one.
  const Schedule plain = make_builtin("1f1b", {2, 4});
  const Schedule recompute = add_memory_actions(plain, {1, 1}, {0, 0});
  const Schedule offload = add_memory_actions(plain, {1, 1}, {1, 1}, {1, 1});
  const ModelPlan plan = plan_for(sizes({15, 15}));
  const std::vector<MemoryDecision> decisions(kNodes, MemoryDecision::Recompute);
  const auto kept = train(recompute, plan, 2, adamw(), {}, decisions);
  const auto moved = train(offload, plan, 2, adamw(), {}, decisions, {1, 1});
  const int64_t checkpoint = 2 * 8 * 16 * 8;
  for (const StepReport& step : moved[0].steps) EXPECT_EQ(step.peak_offloaded_bytes, 2 * checkpoint);
  for (const StepReport& step : moved[1].steps) EXPECT_EQ(step.peak_offloaded_bytes, checkpoint);
  for (const StepReport& step : kept[0].steps) EXPECT_EQ(step.peak_offloaded_bytes, 0);
  EXPECT_LT(moved[0].steps[1].peak_saved_bytes, kept[0].steps[1].peak_saved_bytes);
  EXPECT_LT(difference(moved, plan, 4, 2, adamw()), 1e-12);
  // Without the flag the same OFFLOAD moves nothing (no operator is decided Offload).
  const auto unflagged = train(offload, plan, 1, adamw(), {}, decisions);
  for (const RankResult& rank : unflagged) EXPECT_EQ(rank.steps[0].peak_offloaded_bytes, 0);
}

TEST(Executor, MemoryDecisionsMustCoverTheGraph) {
  const ModelPlan plan = plan_for(balanced(2));
  auto transports = make_local_transports(2);
  ExecutorOptions options;
  options.memory_decisions.assign(3, MemoryDecision::Recompute);
  try {
    Executor(make_builtin("1f1b", {2, 4}), plan, *transports[0], HookRegistry{}, options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "3 memory decisions for the 30 operators of the model (one per graph node, or none)");
  }
  options.memory_decisions.clear();
  options.offload_checkpoints = {1, 0, 0};
  try {
    Executor(make_builtin("1f1b", {2, 4}), plan, *transports[0], HookRegistry{}, options);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "3 checkpoint offload flags for the 2 model chunks (one per chunk, or none)");
  }
}

TEST(Executor, Float32WithSgdIsWithinOneMillionth) {
  const OptimizerConfig sgd{"sgd", 0.1, 0};
  for (const char* name : {"1f1b", "zb-h1", "interleaved-1f1b"}) {
    const Schedule schedule = compile_builtin(name, {2, 4, 0}).schedule;
    const ModelPlan plan = plan_for(balanced(schedule.stages_per_pipeline), at::kFloat);
    EXPECT_LT(difference(train(schedule, plan, 3, sgd), plan, 4, 3, sgd), 1e-6) << name;
  }
}

TEST(Executor, MismatchesAreRejectedBeforeAnyCommunication) {
  const ModelPlan plan = plan_for(balanced(2));
  auto transports = make_local_transports(3);
  const HookRegistry none;
  try {
    Executor(make_builtin("1f1b", {2, 4}), plan, *transports[0], none, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "schedule 1f1b runs on 2 devices but the job has 3 ranks");
  }
  auto two = make_local_transports(2);
  try {
    Executor(make_builtin("interleaved-1f1b", {2, 4, 2}), plan, *two[0], none, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "schedule interleaved-1f1b has 4 stages per pipeline but the model is cut into 2 chunks");
  }
  try {
    Executor(example_schedule(), plan, *two[0], none, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "schedule 1f1b-offload-recompute uses operation GRAD_ALLREDUCE but no hook is registered for it "
                 "(registered: none); map it with --hook GRAD_ALLREDUCE=noop|log|sleep:MS");
  }
}

TEST(Executor, ASilentPeerTimesOutNamingTheRankAndAction) {
  const Schedule schedule = make_builtin("1f1b", {2, 2});
  const ModelPlan plan = plan_for(balanced(2));
  auto transports = make_local_transports(2);
  ExecutorOptions options;
  options.timeout = std::chrono::milliseconds(300);
  Executor executor(schedule, plan, *transports[1], HookRegistry{}, options);
  // Rank 0 never starts: rank 1 gives up at the step's starting barrier.
  try {
    executor.run_step(0, make_batch(plan, 2, 0));
    FAIL();
  } catch (const PeerFailure& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: step 0: waiting for every rank at the start of the step"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace flexpipe::runtime
