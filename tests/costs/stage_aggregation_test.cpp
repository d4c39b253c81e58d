// Per-stage aggregation on hand-computed graphs (a chain with a residual, a ResNet block, a U-Net)
// and on zoo graphs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dag_graphs.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/partition/stage_memory.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

// embed -> ln -> attn -> add -> head, with the residual embed -> add. Times scale with b*s from the
// reference (1, 10); memory is per token.
CostGraph hand_graph() {
  CostGraph g;
  g.name = "hand";
  g.reference = {1, 10};
  auto node = [&](const char* name, double f, double i, double w, double saved, double freed, double params) {
    OperatorNode n;
    n.name = name;
    n.scaling = {ScalingRule::Power, 1, 1};
    n.forward.time = f;
    n.backward_input.time = i;
    n.backward_weight.time = w;
    n.saved_bytes = per_token(saved);
    n.freed_by_input = per_token(freed);
    n.output_bytes = per_token(4);
    n.parameters = n.active_parameters = params;
    n.forward.flops = per_token(f);
    g.nodes.push_back(n);
  };
  node("embed", 1, 0, 0.5, 1, 0, 100);
  node("ln", 2, 1, 1, 2, 0, 10);
  node("attn", 4, 3, 0, 5, 5, 0);
  node("add", 1, 0, 0, 0, 0, 0);
  node("head", 3, 2, 2, 3, 1, 50);
  g.nodes[4].tied_to = 0;
  for (auto [from, to] : {std::pair{0, 1}, {1, 2}, {2, 3}, {0, 3}, {3, 4}}) g.edges.push_back({from, to, per_token(4)});
  validate_cost_graph(g, "hand");
  return g;
}

AggregationOptions options_at(double b, double s) {
  AggregationOptions options;
  options.shape = {b, s};
  options.host_link = {0.5, 50};
  options.device_link = {0.1, 1000};
  return options;
}

std::string error_of(auto&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(StageAggregation, HandComputedContiguousRanges) {
  const CostGraph g = hand_graph();
  const std::vector<int> sizes{2, 2, 1};
  const StageAggregate result = aggregate_stages(g, partition_from_sizes(g, sizes), options_at(2, 10));
  ASSERT_EQ(result.table.stages.size(), 3u);
  const StageCosts& s0 = result.table.stages[0];
  const StageCosts& s1 = result.table.stages[1];
  const StageCosts& s2 = result.table.stages[2];
  // Times double (b*s = 20 against 10); memory is per token (20 tokens).
  EXPECT_EQ(s0, (StageCosts{6, 2, 3, 5, 0, 0, 60, 0, 0, 220, 220, 1320, 160}));
  // Stage 1 receives ln's output, which attn reads and saves (100 >= 80), and embed's, which only
  // add reads and add saves nothing: the stage holds those 80 bytes as its input until the backward
  // ends (not freed by I).
  EXPECT_EQ(s1, (StageCosts{10, 6, 0, 6, 0, 0, 100 + 80, 100, 0, 0, 0, 0, 80}));
  // The head's tied copy of the embedding is held by the last stage. It receives add's 80 bytes and
  // saves 60, taken to be part of them: the other 20 are held as the stage input.
  EXPECT_EQ(s2, (StageCosts{6, 4, 4, 8, 0, 0, 60 + 20, 20, 0, 100, 100, 600, 0}));
  EXPECT_EQ(result.details[1].input_bytes, 160);  // ln's output and the residual both cross cut 0
  EXPECT_EQ(result.details[0].held_input_bytes, 0);
  EXPECT_EQ(result.details[1].held_input_bytes, 80);
  EXPECT_EQ(result.details[2].held_input_bytes, 20);
  for (const StageCosts& stage : result.table.stages) EXPECT_EQ(stage.workspace_bytes, 0);
  EXPECT_EQ(result.details[2].parameters, 50);
  EXPECT_EQ(result.details[0].forward_flops, (1 + 2) * 20);
  EXPECT_EQ(result.table.link, (Link{0.1, 1000}));
  EXPECT_EQ(result.table.memory_unit, "bytes");
  EXPECT_EQ(result.table.time_unit, "ms");
}

// A captured model's buffers are static memory beside the weights, held once per stage however many
// of its operators read them, on every stage that reads them; never trained, so no gradient, no
// optimizer state and no optimizer time.
TEST(StageAggregation, BuffersAreHeldOncePerStageThatReadsThem) {
  CostGraph g = hand_graph();
  g.nodes[0].buffers = {{"mask", 1000}};
  g.nodes[1].buffers = {{"mask", 1000}, {"stats", 24}};
  g.nodes[4].buffers = {{"mask", 1000}};
  const std::vector<int> sizes{2, 2, 1};
  const StageAggregate with = aggregate_stages(g, partition_from_sizes(g, sizes), options_at(2, 10));
  const StageAggregate without = aggregate_stages(hand_graph(), partition_from_sizes(g, sizes), options_at(2, 10));
  const std::vector<double> buffers = {1000 + 24, 0, 1000};
  for (size_t k = 0; k < 3; ++k) {
    const StageCosts &a = with.table.stages[k], &b = without.table.stages[k];
    EXPECT_EQ(a.parameter_bytes, b.parameter_bytes + buffers[k]) << k;
    EXPECT_EQ(a.gradient_bytes, b.gradient_bytes) << k;
    EXPECT_EQ(a.optimizer_bytes, b.optimizer_bytes) << k;
    EXPECT_EQ(a.optimizer, b.optimizer) << k;
  }
}

TEST(StageAggregation, RecomputeKeepsCheckpointsAndOffloadCountsBytes) {
  const CostGraph g = hand_graph();
  AggregationOptions options = options_at(2, 10);
  options.decisions = {MemoryDecision::Keep, MemoryDecision::Recompute, MemoryDecision::Offload, MemoryDecision::Keep,
                       MemoryDecision::Keep};
  const StageAggregate result = aggregate_stages(g, partition_from_sizes(g, std::vector<int>{2, 2, 1}), options);
  const StageCosts& s0 = result.table.stages[0];
  EXPECT_EQ(s0.recompute, 4);          // ln's forward at b*s = 20
  EXPECT_EQ(s0.activation_bytes, 40);  // what R rebuilds: ln's saved bytes
  EXPECT_EQ(s0.freed_by_input, 0);
  EXPECT_EQ(s0.checkpoint_bytes, 80 + 20);  // ln's input (embed's output) + embed's own saved bytes
  const StageCosts& s1 = result.table.stages[1];
  // Offloaded bytes are still allocated by F; the residual add reads (80 bytes) is the stage input.
  EXPECT_EQ(s1.activation_bytes, 100 + 80);
  EXPECT_EQ(result.details[1].offload_bytes, 100);
  EXPECT_EQ(result.details[1].offload_time, 0.5 + 100.0 / 50);
  EXPECT_EQ(result.details[0].offload_bytes, 0);
  // The table tells the simulator's OFFLOAD what to move: attn's bytes in stage 1; stages without an
  // offloaded operator keep the default (everything held).
  EXPECT_EQ(s1.offload_bytes, 100);
  EXPECT_EQ(s0.offload_bytes, kInfinity);
  EXPECT_EQ(result.table.stages[2].offload_bytes, kInfinity);
}

TEST(StageAggregation, OffloadedCheckpointsAddToWhatOffloadMoves) {
  const CostGraph g = hand_graph();
  AggregationOptions options = options_at(2, 10);
  options.decisions = {MemoryDecision::Keep, MemoryDecision::Recompute, MemoryDecision::Offload, MemoryDecision::Keep,
                       MemoryDecision::Keep};
  options.offload_checkpoints = {1, 1, 0};
  const StageAggregate result = aggregate_stages(g, partition_from_sizes(g, std::vector<int>{2, 2, 1}), options);
  // Stage 0 recomputes ln from embed's output (80 bytes): OFFLOAD moves that checkpoint; F still
  // keeps it and embed's saved bytes until then.
  EXPECT_EQ(result.table.stages[0].checkpoint_bytes, 80 + 20);
  EXPECT_EQ(result.table.stages[0].offload_bytes, 80);
  EXPECT_EQ(result.details[0].offload_bytes, 80);
  EXPECT_EQ(result.details[0].offload_time, 0.5 + 80.0 / 50);
  // Stage 1 recomputes nothing: only its offloaded operator moves.
  EXPECT_EQ(result.table.stages[1].offload_bytes, 100);
  EXPECT_EQ(result.table.stages[2].offload_bytes, kInfinity);
  options.offload_checkpoints = {1, 1};
  EXPECT_EQ(error_of([&] {
              aggregate_stages(g, partition_from_sizes(g, std::vector<int>{2, 2, 1}), options);
            }),
            "2 checkpoint offload flags for the 3 stages of the partition");
}

TEST(StageAggregation, FullStageRecomputeCheckpointsExactlyTheStageInputs) {
  const CostGraph g = hand_graph();
  AggregationOptions options = options_at(2, 10);
  options.decisions.assign(5, MemoryDecision::Keep);
  options.decisions[2] = options.decisions[3] = MemoryDecision::Recompute;
  const StageAggregate result = aggregate_stages(g, partition_from_sizes(g, std::vector<int>{2, 2, 1}), options);
  const StageCosts& s1 = result.table.stages[1];
  EXPECT_EQ(s1.recompute, s1.forward);
  EXPECT_EQ(s1.checkpoint_bytes, result.details[1].input_bytes);
  EXPECT_EQ(s1.activation_bytes, 100);
}

TEST(StageAggregation, RecomputeSegmentsStayWithinLayers) {
  CostGraph g = hand_graph();
  for (const char* name : {"embedding", "block", "head"}) g.layers.push_back({name, LayerRole::Other});
  for (int v = 0; v < 5; ++v) g.nodes[v].layer = v == 0 ? 0 : v < 3 ? 1 : 2;
  validate_cost_graph(g, "hand");
  AggregationOptions options = options_at(2, 10);  // 20 tokens
  options.decisions.assign(5, MemoryDecision::Recompute);
  const StageCosts s = aggregate_stages(g, partition_from_sizes(g, std::vector<int>{5}), options).table.stages[0];
  // Segments {embed} 20, {ln, attn} 40 + 100, {add, head} 0 + 60: a whole backward holds 140 at once.
  EXPECT_EQ(s.activation_bytes, 220);
  EXPECT_EQ(s.rebuilt_peak_bytes, 140);
  // Checkpoints: embed's output (80), read by ln and add in other segments, kept once; attn's (80),
  // read by add; head reads add in its own segment.
  EXPECT_EQ(s.checkpoint_bytes, 160);
}

// The segment rule itself: a kept operator, a layer boundary and a stage boundary each end a segment.
TEST(StageAggregation, RecomputeSegmentsEndAtKeptOperatorsLayersAndStages) {
  CostGraph g = hand_graph();
  for (const char* name : {"embedding", "block", "head"}) g.layers.push_back({name, LayerRole::Other});
  for (int v = 0; v < 5; ++v) g.nodes[v].layer = v == 0 ? 0 : v < 4 ? 1 : 2;  // embed | ln attn add | head
  using D = MemoryDecision;
  const std::vector<D> all(5, D::Recompute);
  const Partition one = partition_from_sizes(g, std::vector<int>{5});
  EXPECT_EQ(recompute_segments(g, one, all), (std::vector<int>{0, 1, 1, 1, 4}));
  EXPECT_EQ(recompute_segments(g, one, std::vector<D>{D::Keep, D::Recompute, D::Keep, D::Recompute, D::Recompute}),
            (std::vector<int>{-1, 1, -1, 3, 4}));
  EXPECT_EQ(recompute_segments(g, one, std::vector<D>{D::Recompute, D::Offload, D::Recompute, D::Recompute, D::Keep}),
            (std::vector<int>{0, -1, 2, 2, -1}));
  EXPECT_EQ(recompute_segments(g, partition_from_sizes(g, std::vector<int>{3, 2}), all),
            (std::vector<int>{0, 1, 1, 3, 4}));
  EXPECT_EQ(error_of([&] { recompute_segments(g, one, std::vector<D>(4, D::Keep)); }),
            "recompute segments of 'hand': 4 decisions and 5 stage entries for 5 operators");
}

// attn saves ln's 2 bytes per token too: held once where both hold them alike, and released at I
// only when both release them then (ln has parameters and releases at W).
TEST(StageAggregation, TensorsTwoOperatorsSaveCountOnceWhereBothHoldThemAlike) {
  CostGraph g = hand_graph();
  g.nodes[2].shared_saved_bytes = per_token(2);
  validate_cost_graph(g, "hand");
  const Partition partition = partition_from_sizes(g, std::vector<int>{1, 2, 2});  // ln and attn together
  using D = MemoryDecision;
  auto stage1 = [&](std::vector<D> decisions) {
    AggregationOptions options = options_at(2, 10);  // 20 tokens
    options.decisions = std::move(decisions);
    return aggregate_stages(g, partition, options);
  };
  // The stage receives embed's 80 bytes; ln saves 40 of them, and the other 40 (read by add, on the
  // next stage) are held as the stage input whatever ln and attn decide.
  const StageCosts kept = stage1({D::Keep, D::Keep, D::Keep, D::Keep, D::Keep}).table.stages[1];
  EXPECT_EQ(kept.activation_bytes, (2 + 5 - 2) * 20 + 40);
  EXPECT_EQ(kept.freed_by_input, 3 * 20);  // attn's own; the shared 40 stay with ln until W
  const StageCosts rebuilt = stage1({D::Keep, D::Recompute, D::Recompute, D::Keep, D::Keep}).table.stages[1];
  EXPECT_EQ(rebuilt.activation_bytes, 100);
  EXPECT_EQ(rebuilt.rebuilt_peak_bytes, 100);
  EXPECT_EQ(rebuilt.freed_by_input, 60);
  // Held two ways they are two tensors: ln keeps its 40, attn rebuilds its 100 from ln's output (80).
  const StageCosts mixed = stage1({D::Keep, D::Keep, D::Recompute, D::Keep, D::Keep}).table.stages[1];
  EXPECT_EQ(mixed.activation_bytes, 100);
  EXPECT_EQ(mixed.checkpoint_bytes, 80 + 40 + 40);
  EXPECT_EQ(stage1({D::Keep, D::Offload, D::Offload, D::Keep, D::Keep}).details[1].offload_bytes, 100);
  // The partitioner's model agrees.
  const OperatorTable ops = make_operator_table(g, {2, 10});
  StageContext one;
  one.in_flight = 1;
  EXPECT_EQ(evaluate_stage_memory(ops, 1, 3, one, {D::Keep, D::Keep}).activation_memory, 100 + 40);
  // Rebuilt, ln checkpoints the part of embed's output the stage input does not hold already (40).
  EXPECT_EQ(evaluate_stage_memory(ops, 1, 3, one, {D::Recompute, D::Recompute}).activation_memory, 40 + 40 + 100);
}

// A stage's workspace is its largest operator's: operators run one at a time.
TEST(StageAggregation, WorkspaceIsTheLargestOperatorsOfTheStage) {
  CostGraph g = hand_graph();
  g.nodes[2].workspace_bytes = per_token(7);  // attn
  g.nodes[3].workspace_bytes = per_token(2);  // add
  g.nodes[4].workspace_bytes = per_token(5);  // head
  const StageAggregate result =
      aggregate_stages(g, partition_from_sizes(g, std::vector<int>{2, 2, 1}), options_at(2, 10));
  EXPECT_EQ(result.table.stages[0].workspace_bytes, 0);
  EXPECT_EQ(result.table.stages[1].workspace_bytes, 7 * 20);
  EXPECT_EQ(result.table.stages[2].workspace_bytes, 5 * 20);
  EXPECT_EQ(result.details[1].workspace_bytes, 7 * 20);
}

TEST(StageAggregation, ExplicitSetsAndSharedProducers) {
  const CostGraph g = hand_graph();
  const Partition partition = partition_from_sets(g, {{"embed"}, {"ln", "attn", "add"}, {"head"}});
  EXPECT_EQ(partition.stage_of_node, (std::vector<int>{0, 1, 1, 1, 2}));
  const StageAggregate result = aggregate_stages(g, partition, options_at(1, 10));
  // embed feeds ln and add: its one output crosses once.
  EXPECT_EQ(result.table.stages[0].output_bytes, 40);
  EXPECT_EQ(result.table.stages[1].output_bytes, 40);
}

TEST(StageAggregation, EmptyStagesPassTensorsThrough) {
  const CostGraph g = hand_graph();
  const StageAggregate result =
      aggregate_stages(g, partition_from_sizes(g, std::vector<int>{1, 0, 4}), options_at(1, 10));
  EXPECT_EQ(result.table.stages[1].forward, 0);
  EXPECT_EQ(result.table.stages[0].output_bytes, 40);
  EXPECT_EQ(result.table.stages[1].output_bytes, 40);
}

// A ResNet block (tests/common/dag_graphs.h) cut inside: stage 1 holds relu1 .. add. The residual
// stem -> add crosses the cut next to bn1's output; add, its only reader there, saves nothing, so
// the stage holds it as its input until the backward ends.
TEST(StageAggregation, AResidualCutInsideItsBlockIsHeldByTheStageThatJoinsIt) {
  const CostGraph g = test::residual_block_graph();
  AggregationOptions options;
  const StageAggregate inside = aggregate_stages(g, partition_from_sizes(g, std::vector<int>{3, 4, 2}), options);
  // Cut 0: bn1's 6 bytes (to relu1) and the residual's 10 (to add); cut 1: add's 10.
  EXPECT_EQ(inside.table.stages[0].output_bytes, 6 + 10);
  EXPECT_EQ(inside.table.stages[1].output_bytes, 10);
  EXPECT_EQ(inside.details[1].input_bytes, 16);
  // relu1 saves the 6 bytes it reads; relu2 the 10.
  EXPECT_EQ(inside.details[0].held_input_bytes, 0);
  EXPECT_EQ(inside.details[1].held_input_bytes, 10);
  EXPECT_EQ(inside.details[2].held_input_bytes, 0);
  EXPECT_EQ(inside.table.stages[0].activation_bytes, 3 + 10 + 6);
  EXPECT_EQ(inside.table.stages[1].activation_bytes, 6 + 6 + 10 + 0 + 10);
  EXPECT_EQ(inside.table.stages[1].freed_by_input, 6);  // relu1's; the residual stays until W
  EXPECT_EQ(inside.table.stages[2].activation_bytes, 10 + 10);
  // Recomputing stage 1 whole: relu1 .. add are one segment. It checkpoints bn1's output, the residual
  // is the stage input it holds anyway: together what the stage received.
  options.decisions.assign(9, MemoryDecision::Keep);
  for (int v = 3; v <= 6; ++v) options.decisions[v] = MemoryDecision::Recompute;
  const StageCosts rebuilt =
      aggregate_stages(g, partition_from_sizes(g, std::vector<int>{3, 4, 2}), options).table.stages[1];
  EXPECT_EQ(rebuilt.checkpoint_bytes, 6 + 10);
  EXPECT_EQ(rebuilt.activation_bytes, 6 + 6 + 10);
  EXPECT_EQ(rebuilt.rebuilt_peak_bytes, 22);
  // Cut at the block's edges instead, the residual's one 10-byte tensor crosses once and conv1 saves it.
  const StageAggregate between =
      aggregate_stages(g, partition_from_sizes(g, std::vector<int>{1, 7, 1}), AggregationOptions{});
  EXPECT_EQ(between.table.stages[0].output_bytes, 10);
  EXPECT_EQ(between.details[1].held_input_bytes, 0);
  EXPECT_EQ(between.table.stages[1].activation_bytes, 10 + 6 + 6 + 6 + 10 + 0 + 10);
}

// What a captured graph says per edge: which part of a tensor its reader saves. stem -> relu -> conv
// -> head: the ReLU saves its output (10), not the tensor it reads; the convolution saves the ReLU's
// output, which the ReLU counted already (0 on its edge and in its saved bytes); the head saves the
// convolution's output (6). A cut before the ReLU leaves what the stage receives held whole.
// stem -> relu -> conv -> head, the ReLU and the convolution one block; `conv_saves`: the
// convolution's saved bytes.
CostGraph relu_cut_graph(double conv_saves) {
  return test::dag_graph("relu-cut",
                         {{"stem", "conv", 2, 1, 3, 10},
                          {"relu", "relu", 1, 0, 10, 10},
                          {"conv", "conv", 4, 2, conv_saves, 6},
                          {"head", "linear", 2, 1, 6, 1}},
                         {"stem", "block", "head"}, {0, 1, 1, 2}, {{0, 1}, {1, 2}, {2, 3}});
}

TEST(StageAggregation, AReaderThatSavesItsOutputLeavesTheTensorItReceivesHeld) {
  CostGraph g = relu_cut_graph(0);
  const Partition partition = partition_from_sizes(g, std::vector<int>{1, 3});
  // Unknown, the ReLU is taken to save the 10 bytes it reads: nothing else held.
  EXPECT_EQ(aggregate_stages(g, partition, AggregationOptions{}).table.stages[1].activation_bytes, 10 + 0 + 6);
  g.edges[0].saved_bytes = fixed_amount(0);
  g.edges[1].saved_bytes = fixed_amount(0);
  g.edges[2].saved_bytes = fixed_amount(6);
  validate_cost_graph(g, "relu-cut");
  const StageAggregate known = aggregate_stages(g, partition, AggregationOptions{});
  EXPECT_EQ(known.details[1].held_input_bytes, 10);
  EXPECT_EQ(known.table.stages[1].activation_bytes, 10 + 10 + 0 + 6);
  // Cut after the ReLU instead, the convolution saves the very tensor the stage receives: held once.
  const StageAggregate after = aggregate_stages(g, partition_from_sizes(g, std::vector<int>{2, 2}), {});
  EXPECT_EQ(after.table.stages[1].activation_bytes, 10 + 0 + 6);
  // The partitioner's model agrees.
  const OperatorTable ops = make_operator_table(g, {1, 1});
  StageContext one;
  EXPECT_EQ(evaluate_stage_memory(ops, 1, 4, one, std::vector<MemoryDecision>(3, MemoryDecision::Keep))
                .activation_memory,
            26);
  EXPECT_EQ(held_input_bytes(ops, 1, 4), 10);
  EXPECT_EQ(held_input_bytes(ops, 2, 4), 10);
}

// The same graph cut after the ReLU, the convolution offloaded: it saves the tensor the stage received
// (10 bytes) and its own 6. OFFLOAD moves both, unless the runtime holds what the stage received until
// the backward anyway (a captured model's, which the graph's capture record says): then only the 6.
TEST(StageAggregation, OffloadLeavesTheReceivedTensorWhereTheRuntimeHoldsIt) {
  CostGraph g = relu_cut_graph(16);
  g.edges[1].saved_bytes = fixed_amount(10);
  validate_cost_graph(g, "relu-cut");
  const Partition partition = partition_from_sizes(g, std::vector<int>{2, 2});
  AggregationOptions options;
  options.decisions = {MemoryDecision::Keep, MemoryDecision::Keep, MemoryDecision::Offload, MemoryDecision::Keep};
  EXPECT_EQ(aggregate_stages(g, partition, options).table.stages[1].offload_bytes, 16);
  g.capture = CaptureRecord{};
  const StageAggregate kept = aggregate_stages(g, partition, options);
  EXPECT_EQ(kept.table.stages[1].offload_bytes, 6);
  EXPECT_EQ(kept.table.stages[1].activation_bytes, 16 + 6);  // the head saves 6 besides: all on the device at F
}

// stem -> conv -> relu -> head, the convolution and the ReLU recomputed as one segment. The
// convolution saves its input, which is the segment's checkpoint: the rebuild reads it in place, so
// R rebuilds only the ReLU's output. Unknown, the checkpoint was counted a second time as rebuilt.
TEST(StageAggregation, ARecomputedReaderThatSavesItsCheckpointDoesNotRebuildIt) {
  CostGraph g = test::dag_graph("conv-recompute",
                                {{"stem", "conv", 2, 1, 3, 10},
                                 {"conv", "conv", 4, 2, 10, 6},
                                 {"relu", "relu", 1, 0, 6, 6},
                                 {"head", "linear", 2, 1, 0, 1}},
                                {"stem", "block", "head"}, {0, 1, 1, 2}, {{0, 1}, {1, 2}, {2, 3}});
  const Partition partition = partition_from_sizes(g, std::vector<int>{1, 3});
  using D = MemoryDecision;
  AggregationOptions options;
  options.decisions = {D::Keep, D::Recompute, D::Recompute, D::Keep};
  const StageCosts unknown = aggregate_stages(g, partition, options).table.stages[1];
  EXPECT_EQ(unknown.checkpoint_bytes, 10);
  EXPECT_EQ(unknown.activation_bytes, 10 + 6);
  g.edges[0].saved_bytes = fixed_amount(10);
  g.edges[1].saved_bytes = fixed_amount(0);
  g.edges[2].saved_bytes = fixed_amount(0);
  validate_cost_graph(g, "conv-recompute");
  const StageCosts known = aggregate_stages(g, partition, options).table.stages[1];
  EXPECT_EQ(known.checkpoint_bytes, 10);  // what the stage received, which the convolution reads
  EXPECT_EQ(known.activation_bytes, 6);
  EXPECT_EQ(known.rebuilt_peak_bytes, 6);
  EXPECT_EQ(known.freed_by_input, 6);  // the ReLU has no parameters; the convolution rebuilds nothing
  // Kept, the convolution's saved bytes are the received tensor, held once.
  options.decisions.assign(4, D::Keep);
  EXPECT_EQ(aggregate_stages(g, partition, options).table.stages[1].activation_bytes, 10 + 6);
  // The partitioner's model agrees: 10 checkpointed, 6 rebuilt.
  const OperatorTable ops = make_operator_table(g, {1, 1});
  const StageMemoryPlan plan = evaluate_stage_memory(ops, 1, 4, StageContext{}, {D::Recompute, D::Recompute, D::Keep});
  EXPECT_EQ(plan.checkpoint_bytes, 10);
  EXPECT_EQ(plan.activation_memory, 10 + 6);
}

// stem -> relu -> conv -> head in one stage, the convolution recomputed: its checkpoint is the
// ReLU's output, which the kept ReLU saves itself (saved_output_bytes): held once, not again as a
// checkpoint.
TEST(StageAggregation, ACheckpointAKeptOperatorSavesIsHeldOnce) {
  CostGraph g = test::dag_graph("kept-relu",
                                {{"stem", "conv", 2, 1, 3, 10},
                                 {"relu", "relu", 1, 0, 10, 10},
                                 {"conv", "conv", 4, 2, 0, 6},
                                 {"head", "linear", 2, 1, 6, 1}},
                                {"stem", "block", "head"}, {0, 1, 1, 2}, {{0, 1}, {1, 2}, {2, 3}});
  using D = MemoryDecision;
  AggregationOptions options;
  options.decisions = {D::Keep, D::Keep, D::Recompute, D::Keep};
  const Partition one = partition_from_sizes(g, std::vector<int>{4});
  EXPECT_EQ(aggregate_stages(g, one, options).table.stages[0].checkpoint_bytes, 3 + 10 + 6 + 10);
  g.nodes[1].saved_output_bytes = fixed_amount(10);
  validate_cost_graph(g, "kept-relu");
  EXPECT_EQ(aggregate_stages(g, one, options).table.stages[0].checkpoint_bytes, 3 + 10 + 6);
  // Recomputed with the convolution (one segment), the ReLU rebuilds it: the segment checkpoints the
  // stem's output.
  options.decisions = {D::Keep, D::Recompute, D::Recompute, D::Keep};
  EXPECT_EQ(aggregate_stages(g, one, options).table.stages[0].checkpoint_bytes, 3 + 6 + 10);
  g.nodes[1].saved_output_bytes = fixed_amount(11);
  EXPECT_EQ(error_of([&] { validate_cost_graph(g, "kept-relu"); }),
            "kept-relu: nodes[1] ('relu'): saved_output_bytes 11 exceed saved_bytes 10 or output_bytes 10 at the "
            "reference shape");
}

// A U-Net (tests/common/dag_graphs.h) in three stages: in enc1 down1 | enc2 down2 mid up2 | cat2 ..
// head. The skip enc1 -> cat1 crosses both cuts: each sends it, stage 1 carries it through without
// reading it, and both later stages hold it. Hand-computed per stage.
TEST(StageAggregation, ASkipAcrossTwoCutsIsSentOverBothAndHeldByEveryStageItReaches) {
  const CostGraph g = test::unet_graph();
  const Partition partition = partition_from_sizes(g, std::vector<int>{3, 4, 6});
  const StageAggregate kept = aggregate_stages(g, partition, AggregationOptions{});
  // Cut 0: down1's 4 bytes (to enc2) and enc1's 8 (to cat1). Cut 1: up2's 4 and enc2's 4 (both to
  // cat2) and enc1's 8 again.
  EXPECT_EQ(kept.table.stages[0].output_bytes, 4 + 8);
  EXPECT_EQ(kept.table.stages[1].output_bytes, 4 + 4 + 8);
  EXPECT_EQ(kept.table.stages[2].output_bytes, 0);
  EXPECT_EQ(kept.details[0].input_bytes, 0);
  EXPECT_EQ(kept.details[1].input_bytes, 12);
  EXPECT_EQ(kept.details[2].input_bytes, 16);
  // Stage 1: enc2 saves the 4 bytes of down1 it reads; enc1's 8 are carried through. Stage 2: the
  // concatenations save nothing, so all 16 bytes it receives are its input until the backward ends.
  EXPECT_EQ(kept.details[1].held_input_bytes, 8);
  EXPECT_EQ(kept.details[2].held_input_bytes, 16);
  EXPECT_EQ(kept.table.stages[0].activation_bytes, 2 + 8 + 8);
  EXPECT_EQ(kept.table.stages[1].activation_bytes, 4 + 4 + 2 + 2 + 8);
  EXPECT_EQ(kept.table.stages[2].activation_bytes, 0 + 8 + 4 + 0 + 16 + 8 + 16);
  // Released at I: the saved bytes of operators without parameters; never the stage input.
  EXPECT_EQ(kept.table.stages[1].freed_by_input, 4 + 2);
  EXPECT_EQ(kept.table.stages[2].freed_by_input, 4);

  // Everything recomputed, segment by segment within the layers: stage 1 is {enc2} {down2 mid up2},
  // stage 2 {cat2 dec2} {up1 cat1 dec1 head}. Checkpoints: stage 1 keeps down1's output for enc2 and
  // enc2's for down2; stage 2 keeps dec2's for up1, and reads everything else from its input.
  AggregationOptions recomputed;
  recomputed.decisions.assign(13, MemoryDecision::Recompute);
  recomputed.offload_checkpoints = {0, 1, 0};
  const StageAggregate rebuilt = aggregate_stages(g, partition, recomputed);
  const StageCosts& s1 = rebuilt.table.stages[1];
  const StageCosts& s2 = rebuilt.table.stages[2];
  EXPECT_EQ(s1.checkpoint_bytes, 4 + 4 + 8);
  EXPECT_EQ(s1.rebuilt_peak_bytes, 4 + 2 + 2);
  EXPECT_EQ(s1.activation_bytes, 12);
  EXPECT_EQ(s2.checkpoint_bytes, 4 + 16);
  EXPECT_EQ(s2.rebuilt_peak_bytes, 4 + 0 + 16 + 8);
  // Stage 1 offloads its checkpoints: OFFLOAD moves them with the carried skip (the runtime moves the
  // stage's inputs with them).
  EXPECT_EQ(s1.offload_bytes, 4 + 4 + 8);
  EXPECT_EQ(rebuilt.details[1].offload_bytes, 16);
  EXPECT_EQ(s2.offload_bytes, kInfinity);
}

TEST(StageAggregation, ErrorsNameWhatIsWrong) {
  const CostGraph g = hand_graph();
  EXPECT_EQ(error_of([&] {
              partition_from_sizes(g, std::vector<int>{2, 2});
            }),
            "the stages hold 4 operators but the graph 'hand' has 5");
  EXPECT_EQ(error_of([&] {
              partition_from_sets(g, {{"embed", "ln", "head"}, {"attn", "add"}});
            }),
            "the tensor 'add' -> 'head' flows from stage 1 back to stage 0; a pipeline only sends forward");
  EXPECT_EQ(error_of([&] {
              partition_from_sets(g, {{"embed", "ln"}, {"attn", "add", "hed"}});
            }),
            "stage 1: unknown operator 'hed'");
  EXPECT_EQ(error_of([&] {
              partition_from_sets(g, {{"embed", "ln"}, {"attn", "ln"}});
            }),
            "stage 1: operator 'ln' is already in stage 0");
  EXPECT_EQ(error_of([&] {
              partition_from_sets(g, {{"embed", "ln"}, {"attn", "add"}});
            }),
            "operator 'head' is in no stage");
  AggregationOptions options = options_at(1, 10);
  options.decisions.assign(3, MemoryDecision::Keep);
  EXPECT_EQ(error_of([&] { aggregate_stages(g, partition_evenly(g, 2), options); }),
            "3 memory decisions for the 5 operators of 'hand'");
}

TEST(StageAggregation, ZooGraphBoundariesCarryTheResidualStream) {
  const CostGraph g = build_model_graph(find_model("gpt3-1.3b"), find_hardware("H100-80GB"));
  const double b = 2, s = 1024, h = 2048, a = 16;
  AggregationOptions options;
  options.shape = {b, s};
  const StageAggregate even = aggregate_stages(g, partition_evenly(g, 4), options);
  // Between layers only the residual stream crosses.
  for (int k = 0; k < 3; ++k) EXPECT_EQ(even.table.stages[k].output_bytes, 2 * b * s * h) << k;
  double forward = 0, parameters = 0;
  for (const StageDetails& d : even.details) parameters += d.parameters;
  for (const StageCosts& c : even.table.stages) forward += c.forward;
  double expected_forward = 0;
  for (const OperatorNode& node : g.nodes) expected_forward += operator_time(g, node, Pass::Forward, {b, s});
  EXPECT_DOUBLE_EQ(forward, expected_forward);
  EXPECT_EQ(parameters, total_parameters(g) + 50257.0 * h);  // the last stage's copy of the tied embedding
  // A cut right after layer 0's softmax: the residual, V and the attention probabilities cross.
  const int cut = find_node(g, "layer.0.softmax") + 1;
  const std::vector<int> sizes{cut, static_cast<int>(g.nodes.size()) - cut};
  const StageAggregate inside = aggregate_stages(g, partition_from_sizes(g, sizes), options);
  EXPECT_EQ(inside.table.stages[0].output_bytes, 2 * b * s * h + 2 * b * s * h + 2 * a * s * s * b);
  // The last stage also holds the head's input and the fp32 softmax of the loss.
  EXPECT_EQ(even.table.stages[3].activation_bytes - even.table.stages[1].activation_bytes,
            b * s * (2 * h + 8 + 4 * 50257.0 + 2 * h));
  EXPECT_GT(even.table.stages[0].optimizer, 0);
}

TEST(Partition, SizesStartsAndStageOfEachOperatorAreOneContiguousPartition) {
  const CostGraph g = hand_graph();  // five operators
  const Partition partition = partition_from_sizes(g, std::vector<int>{2, 2, 1});
  EXPECT_EQ(partition.stage_of_node, (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(operators_per_stage(partition), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(stage_starts(partition), (std::vector<int>{0, 2, 4, 5}));
  EXPECT_EQ(partition_from_starts(g, std::vector<int>{0, 2, 4, 5}), partition);
  EXPECT_EQ(error_of([&] { partition_from_starts(g, std::vector<int>{0}); }), "a partition needs at least one stage");
}

}  // namespace
}  // namespace flexpipe
