// The stage memory model on hand-computed cases, in-flight counts read from schedules, and the exact
// solver against brute force over every keep / recompute / offload assignment.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "dag_graphs.h"
#include "flexpipe/partition/stage_memory.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

using D = MemoryDecision;
constexpr D K = D::Keep, R = D::Recompute, O = D::Offload;

// A chain a -> b -> c -> d with the residual a -> d.
OperatorTable chain() {
  OperatorTable ops;
  ops.forward = {1, 2, 3, 4};
  ops.backward = {2, 4, 6, 8};
  ops.saved = {10, 40, 30, 20};
  ops.workspace = {5, 0, 7, 1};
  ops.parameters = {1, 0, 2, 0};
  ops.tied_to = {kNotTied, kNotTied, kNotTied, kNotTied};
  ops.inputs = {{}, {{0, 8}}, {{1, 6}}, {{2, 9}, {0, 8}}};
  return ops;
}

StageContext context(int k, double budget = kInfinity, double bandwidth = 0, double period = 0) {
  StageContext c;
  c.in_flight = k;
  c.budget = budget;
  c.host_bandwidth = bandwidth;
  c.period = period;
  c.bytes_per_parameter = 16;
  return c;
}

TEST(InFlight, ReadFromTheScheduleOrder) {
  EXPECT_EQ(in_flight_per_chunk(make_builtin("1f1b", {4, 8, 0})), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(in_flight_per_chunk(make_builtin("gpipe", {4, 8, 0})), (std::vector<int>{8, 8, 8, 8}));
  // ZB-H2 keeps up to 2p - 1 micro-batches on the first stage (W deferred).
  EXPECT_EQ(in_flight_per_chunk(make_builtin("zb-h2", {4, 8, 0}))[0], 7);
  const Schedule interleaved = make_builtin("interleaved-1f1b", {2, 4, 2});
  EXPECT_EQ(chunks_sharing_device(interleaved), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(chunks_sharing_device(make_builtin("1f1b", {4, 8, 0})), (std::vector<int>{1, 1, 1, 1}));
}

TEST(StageMemory, KeepAllIsStaticPlusWorkspacePlusKTimesSaved) {
  const StageMemoryPlan plan = evaluate_stage_memory(chain(), 0, 4, context(3), {K, K, K, K});
  EXPECT_DOUBLE_EQ(plan.static_memory, 3 * 16);
  EXPECT_DOUBLE_EQ(plan.activation_memory, 3 * 100);
  EXPECT_DOUBLE_EQ(plan.memory, 48 + 7 + 300);
  EXPECT_DOUBLE_EQ(plan.added_time(), 0);
}

// Buffers (a capture's statistics, masks) are static memory once per stage, whatever the decisions.
TEST(StageMemory, BuffersAreStaticOncePerStage) {
  OperatorTable ops = chain();
  ops.buffers = {{{0, 100}}, {}, {{0, 100}, {1, 6}}, {{1, 6}}};
  EXPECT_DOUBLE_EQ(ops.buffer_bytes(0, 4), 106);
  EXPECT_DOUBLE_EQ(ops.buffer_bytes(1, 2), 0);
  EXPECT_DOUBLE_EQ(ops.buffer_bytes(3, 4), 6);
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 0, 4, context(3), {K, K, K, K}).static_memory, 3 * 16 + 106);
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 2, 4, context(2), {R, O}).static_memory, 2 * 16 + 106);
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 1, 2, context(2), {K}).static_memory, 0);
}

TEST(StageMemory, RecomputedChainKeepsOnlyItsOutsideInputs) {
  // b and c recomputed: b keeps a's output (8), c chains on b (free); d is kept and charges nothing.
  const StageMemoryPlan plan = evaluate_stage_memory(chain(), 0, 4, context(3), {K, R, R, K});
  // k*(kept 10+20 + checkpoints 8) + rebuilt (40+30) once.
  EXPECT_DOUBLE_EQ(plan.activation_memory, 3 * (30 + 8) + 70);
  EXPECT_DOUBLE_EQ(plan.recompute_time, 2 + 3);
  // d recomputed alone: it keeps c's output (9) and a's (8, not adjacent).
  const StageMemoryPlan d_only = evaluate_stage_memory(chain(), 0, 4, context(3), {K, K, K, R});
  EXPECT_DOUBLE_EQ(d_only.activation_memory, 3 * (80 + 17) + 20);
  // A stage starting at b: a's output is the stage's received input, which the rebuild of b reads:
  // a checkpoint like any other (8).
  const StageMemoryPlan tail = evaluate_stage_memory(chain(), 1, 4, context(2), {R, R, K});
  EXPECT_DOUBLE_EQ(tail.activation_memory, 2 * (20 + 8) + 70);
  EXPECT_DOUBLE_EQ(tail.static_memory, 2 * 16);
}

TEST(StageMemory, WholeBackwardRebuildsOneSegmentAtATime) {
  OperatorTable ops = chain();
  ops.layer = {0, 0, 1, 1};
  // b, c and d recomputed: segments {b} (40) and {c, d} (30 + 20). b keeps a's output (8); c starts a
  // segment in a new layer, so it keeps b's (6); d continues c's but keeps a's (8, not adjacent).
  // k * (kept 10 + checkpoints 22) + the largest segment (50).
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 0, 4, context(3), {K, R, R, R}).activation_memory, 3 * 32 + 50);
  // A split backward rebuilds all 90 bytes at once, before I.
  StageContext split = context(3);
  split.split_backward = true;
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 0, 4, split, {K, R, R, R}).activation_memory, 3 * 32 + 90);
  // In one layer b, c, d are one segment: c keeps nothing, and all 90 bytes are alive at once.
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(chain(), 0, 4, context(3), {K, R, R, R}).activation_memory, 3 * 26 + 90);
  // A kept operator ends a segment inside a layer too: {b} and {d}, d keeping c's output (9) and a's.
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(chain(), 0, 4, context(3), {K, R, K, R}).activation_memory,
                   3 * (40 + 8 + 17) + 40);
  // A segment keeps each tensor it reads once: with a's output 8 bytes, b and d of one segment share
  // one checkpoint of it.
  OperatorTable bounded = chain();
  bounded.output = {8, 6, 9, 1};
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(bounded, 0, 4, context(3), {K, R, R, R}).activation_memory, 3 * 18 + 90);
  // In two segments ({b} and {d}) each keeps its own.
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(bounded, 0, 4, context(3), {K, R, K, R}).activation_memory,
                   3 * (40 + 8 + 17) + 40);
}

TEST(StageMemory, TensorsTwoOperatorsSaveCountOnceWhereBothHoldThemAlike) {
  // c's 30 saved bytes include 25 that b saves too (softmax and P V both save the probabilities).
  OperatorTable ops = chain();
  ops.shared = {0, 0, 25, 0};
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 0, 4, context(3), {K, K, K, K}).activation_memory,
                   3 * (10 + 40 + 5 + 20));
  // b and c rebuilt in one segment: 45 bytes rebuilt, a's output (8) kept for it.
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 0, 4, context(3), {K, R, R, K}).activation_memory, 3 * (30 + 8) + 45);
  // Held two ways, they are two tensors: c rebuilds its 30 from b's output (6) while b keeps its 40,
  // or b rebuilds its 40 from a's output (8) while c keeps its 30.
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 0, 4, context(3), {K, K, R, K}).activation_memory, 3 * (70 + 6) + 30);
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 0, 4, context(3), {K, R, K, K}).activation_memory, 3 * (60 + 8) + 40);
  // Both offloaded: 45 bytes move (3 copies on the device, as below).
  const StageMemoryPlan moved = evaluate_stage_memory(ops, 0, 4, context(6, kInfinity, 10, 30), {K, O, O, K});
  EXPECT_DOUBLE_EQ(moved.offload_bytes, 45);
  EXPECT_DOUBLE_EQ(moved.activation_memory, 6 * 30 + 3 * 45);
  // In a stage that starts at c, b's tensors are on another device.
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 2, 4, context(3), {K, K}).activation_memory, 3 * (30 + 20));
  // The solvers see it: with 230 bytes for activations, keeping everything (225) fits with nothing added.
  for (MemorySolver solver : {MemorySolver::Exact, MemorySolver::Greedy}) {
    const StageMemoryPlan plan = optimize_stage_memory(ops, 0, 4, context(3, 48 + 7 + 230), solver);
    EXPECT_TRUE(plan.fits);
    EXPECT_EQ(plan.decisions, (std::vector<D>{K, K, K, K}));
  }
}

TEST(StageMemory, OffloadKeepsCopiesInFlightAndCostsWhatTheReloadCannotHide) {
  // k = 6, bandwidth 10 bytes/unit, period 30: a forward slot is 10; b and c (70 bytes) take 7 to move.
  // On the device: the one just made, the one reloaded, and one slot's worth on its way out: 3 copies.
  const StageMemoryPlan hidden = evaluate_stage_memory(chain(), 0, 4, context(6, kInfinity, 10, 30), {K, O, O, K});
  EXPECT_DOUBLE_EQ(hidden.activation_memory, 6 * 30 + 3 * 70);
  EXPECT_DOUBLE_EQ(hidden.offload_time, 0);
  // Period 15: a slot of 5, the transfer spans two (4 copies) and the reload leaves 2 units unhidden.
  const StageMemoryPlan paid = evaluate_stage_memory(chain(), 0, 4, context(6, kInfinity, 10, 15), {K, O, O, K});
  EXPECT_DOUBLE_EQ(paid.activation_memory, 6 * 30 + 4 * 70);
  EXPECT_DOUBLE_EQ(paid.offload_time, 2);
  // Never more copies than micro-batches in flight.
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(chain(), 0, 4, context(3, kInfinity, 10, 15), {K, O, O, K}).activation_memory,
                   3 * 30 + 3 * 70);
  // A deep pipeline's warm-up: 16 forwards of 10 units back to back, each offloading 70 bytes at 1
  // byte per unit. The transfers queue: after the 16th forward only floor(15 * 10 / 70) = 2 have left,
  // so 14 are still on the device, and the first backward reloads one more: 15 copies, where the
  // steady state alone (a slot of 100) would say 3.
  const StageContext deep = context(16, kInfinity, 1, 300);
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(chain(), 0, 4, deep, {K, O, O, K}).activation_memory, 16 * 30 + 15 * 70);
  // Forwards paced at 35 units (a slower stage before it) let floor(15 * 35 / 70) = 7 leave.
  StageContext paced = deep;
  paced.forward_time = 35;
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(chain(), 0, 4, paced, {K, O, O, K}).activation_memory, 16 * 30 + 10 * 70);
  // Without a host link offloading is impossible.
  EXPECT_FALSE(evaluate_stage_memory(chain(), 0, 4, context(4, kInfinity, 0, 4), {K, O, K, K}).fits);
}

TEST(StageMemory, OffloadedCheckpointsKeepTwoCopiesAndWaitForTheWholeReload) {
  // {b, c} recomputed: one segment, whose checkpoint is a's 8 bytes that b reads; a and d kept (30).
  StageContext kept = context(4, kInfinity, 10, 30);
  const StageMemoryPlan held = evaluate_stage_memory(chain(), 0, 4, kept, {K, R, R, K});
  EXPECT_DOUBLE_EQ(held.activation_memory, 4 * (30 + 8) + 70);
  EXPECT_DOUBLE_EQ(held.checkpoint_bytes, 8);
  EXPECT_DOUBLE_EQ(held.offload_bytes, 0);
  // Offloaded: 8 bytes take 0.8 to move, within one forward slot (10). The newest micro-batch's go out
  // while the next rebuilt one's come in, and R waits for the whole reload: by then only the
  // rebuilt one's are on the device.
  StageContext offloading = kept;
  offloading.offload_checkpoints = true;
  const StageMemoryPlan moved = evaluate_stage_memory(chain(), 0, 4, offloading, {K, R, R, K});
  EXPECT_DOUBLE_EQ(moved.activation_memory, 4 * 30 + 70 + 8);
  EXPECT_DOUBLE_EQ(moved.offload_bytes, 8);
  EXPECT_DOUBLE_EQ(moved.offload_time, 0.8);
  EXPECT_DOUBLE_EQ(moved.recompute_time, 2 + 3);
  EXPECT_TRUE(moved.offload_checkpoints);
  // Offloaded operators travel with the checkpoints and come back with them: d's 20 bytes too. At
  // period 6 (a slot of 2) 28 bytes span two slots: two copies.
  offloading.period = 6;
  const StageMemoryPlan both = evaluate_stage_memory(chain(), 0, 4, offloading, {K, R, R, O});
  EXPECT_DOUBLE_EQ(both.activation_memory, 4 * 10 + 70 + 2 * 28);
  EXPECT_DOUBLE_EQ(both.offload_time, 2.8);
  // While R waits, the incoming and the outgoing copies are both on the device with nothing rebuilt
  // yet: with a, b, d offloaded and only c (30) rebuilt, 2 x 70 - 30 is more than one copy.
  offloading.period = 30;
  const StageMemoryPlan waiting = evaluate_stage_memory(chain(), 0, 4, offloading, {O, O, R, O});
  EXPECT_DOUBLE_EQ(waiting.checkpoint_bytes, 6);  // c reads b
  EXPECT_DOUBLE_EQ(waiting.activation_memory, 30 + (2 * 76 - 30));
  // Without a host link there is nothing to offload to.
  EXPECT_FALSE(can_offload_checkpoints(context(4)));
  EXPECT_FALSE(can_offload_checkpoints(context(1, kInfinity, 10, 30)));
  EXPECT_TRUE(can_offload_checkpoints(context(2, kInfinity, 10, 30)));
}

// Offloading checkpoints needs something recomputed: a plan that offloads operators and recomputes
// nothing runs as plain offloading (the plan file drops the flag, RELOAD comes a compute action ahead
// of the backward), so the solvers price it that way. k = 6, 50 bytes per unit, period 30, budget
// 260: everything offloaded (100 bytes) holds 3 copies as plain offloading (355 in all), where a
// reload right before R would hold 2 (255, within the budget).
TEST(StageMemory, OffloadingCheckpointsNeedsSomethingRecomputed) {
  const StageContext plain = context(6, 260, 50, 30);
  StageContext before_r = plain;
  before_r.offload_checkpoints = true;
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(chain(), 0, 4, plain, {O, O, O, O}).memory, 48 + 7 + 3 * 100);
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(chain(), 0, 4, before_r, {O, O, O, O}).memory, 48 + 7 + 2 * 100);
  for (MemorySolver solver : {MemorySolver::Exact, MemorySolver::Greedy}) {
    const StageMemoryPlan plan = optimize_stage_memory(chain(), 0, 4, plain, solver);
    const bool recomputes = std::find(plan.decisions.begin(), plan.decisions.end(), R) != plan.decisions.end();
    EXPECT_TRUE(recomputes || !plan.offload_checkpoints) << memory_solver_name(solver);
    StageContext as_run = plain;
    as_run.offload_checkpoints = plan.offload_checkpoints;
    EXPECT_DOUBLE_EQ(evaluate_stage_memory(chain(), 0, 4, as_run, plan.decisions).memory, plan.memory);
  }
  const StageMemoryPlan least = least_stage_memory(chain(), 0, 4, plain);
  EXPECT_TRUE(std::find(least.decisions.begin(), least.decisions.end(), R) != least.decisions.end() ||
              !least.offload_checkpoints);
}

TEST(StageMemory, TiedCopyCountsOnceWhenItsOwnerIsInTheStage) {
  OperatorTable ops = chain();
  ops.parameters[3] = 1;
  ops.tied_to[3] = 0;
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 0, 4, context(1), {K, K, K, K}).static_memory, 3 * 16);
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 1, 4, context(1), {K, K, K}).static_memory, 3 * 16);
}

TEST(StageMemory, SolverPicksTheCheapestFit) {
  // Keep all: 48 + 7 + 300 = 355. Budget 300 needs 55 bytes: recomputing b alone saves 3*40 - 40 -
  // 3*8 = 56 at cost 2, the cheapest way.
  const StageMemoryPlan plan = optimize_stage_memory(chain(), 0, 4, context(3, 300), MemorySolver::Exact);
  ASSERT_TRUE(plan.fits);
  EXPECT_EQ(plan.decisions, (std::vector<D>{K, R, K, K}));
  EXPECT_DOUBLE_EQ(plan.added_time(), 2);
  EXPECT_TRUE(plan.exact);
}

TEST(StageMemory, WhatCannotFitReturnsTheLeastMemory) {
  // Static 48 + workspace 7 alone exceed 50.
  const StageMemoryPlan plan = optimize_stage_memory(chain(), 0, 4, context(3, 50), MemorySolver::Exact);
  EXPECT_FALSE(plan.fits);
  EXPECT_GT(plan.memory, 50);
  const StageMemoryPlan greedy = optimize_stage_memory(chain(), 0, 4, context(3, 50), MemorySolver::Greedy);
  EXPECT_FALSE(greedy.fits);
}

TEST(StageMemory, AStoppedSolverFallsBackToTheLeastMemoryDecisions) {
  // A caller out of time (the search, which spent minutes here on 200k operators) stops the solvers
  // between their steps; the answer is then the least-memory decisions, found in one pass: it fits
  // at 300 bytes, but recomputes more than the cheapest fit (b alone, 2 time units).
  for (MemorySolver solver : {MemorySolver::Exact, MemorySolver::Greedy}) {
    StageContext c = context(3, 300);
    const StageMemoryPlan cheapest = optimize_stage_memory(chain(), 0, 4, c, solver);
    ASSERT_TRUE(cheapest.fits);
    EXPECT_EQ(cheapest.decisions, (std::vector<D>{K, R, K, K}));
    int asked = 0;
    const std::function<bool()> out_of_time = [&] { return ++asked > 0; };
    c.should_stop = &out_of_time;
    const StageMemoryPlan stopped = optimize_stage_memory(chain(), 0, 4, c, solver);
    EXPECT_GT(asked, 0);
    EXPECT_TRUE(stopped.fits);
    EXPECT_FALSE(stopped.exact);
    EXPECT_GT(stopped.added_time(), cheapest.added_time());
    EXPECT_EQ(stopped.decisions, least_stage_memory(chain(), 0, 4, c).decisions);
  }
}

// What a stage receives on a DAG, and what of it the stage holds as its input: the U-Net of
// tests/common/dag_graphs.h, whose skips enc1 -> cat1 (8 bytes) and enc2 -> cat2 (4) cross every
// cut between them; the concatenations save nothing.
TEST(StageMemory, ReceivedTensorsNoReaderSavesAreHeldAsTheStageInput) {
  const OperatorTable ops = make_operator_table(test::unet_graph(), {1, 1});
  auto received = [&](int begin, int end) {
    std::vector<std::tuple<int, double, double>> out;
    for (const ReceivedTensor& r : received_tensors(ops, begin, end)) out.emplace_back(r.from, r.bytes, r.read_saved);
    return out;
  };
  using T = std::tuple<int, double, double>;
  // down2 mid (operators 4, 5): enc2's output, which down2 reads and saves, and enc1's, carried
  // through unread.
  EXPECT_EQ(received(4, 6), (std::vector<T>{{1, 8, 0}, {3, 4, 4}}));
  EXPECT_DOUBLE_EQ(held_input_bytes(ops, 4, 6), 8);
  // up2 cat2 dec2 (6 .. 8): mid's output (up2 saves its 2 bytes), and both skips, which cat2 reads
  // and saves nothing of.
  EXPECT_EQ(received(6, 9), (std::vector<T>{{1, 8, 0}, {3, 4, 0}, {5, 2, 2}}));
  EXPECT_DOUBLE_EQ(held_input_bytes(ops, 6, 9), 8 + 4);
  // A stage that starts at enc2 sends its output on: only enc1's skip is held.
  EXPECT_DOUBLE_EQ(held_input_bytes(ops, 3, 9), 8);
  EXPECT_DOUBLE_EQ(held_input_bytes(ops, 0, 13), 0);
  // A table built by hand without the edge index finds the same.
  OperatorTable unindexed = ops;
  unindexed.consumers.clear();
  unindexed.live_start.clear();
  unindexed.live.clear();
  for (int begin = 0; begin <= 13; ++begin)
    for (int end = begin; end <= 13; ++end)
      EXPECT_DOUBLE_EQ(held_input_bytes(unindexed, begin, end), held_input_bytes(ops, begin, end)) << begin << end;

  // The stage down2 mid up2 cat2 dec2 (4 .. 8) at k = 2 keeps everything: its operators save
  // 4 + 2 + 2 + 0 + 8, and it holds enc1's 8 bytes; enc2's 4 are down2's saved input. Static:
  // mid's and dec2's 2 parameters each, 16 bytes per parameter; the largest workspace is 0.
  const StageMemoryPlan kept = evaluate_stage_memory(ops, 4, 9, context(2), {K, K, K, K, K});
  EXPECT_DOUBLE_EQ(kept.input_bytes, 8);
  EXPECT_DOUBLE_EQ(kept.activation_memory, 2 * (16 + 8));
  EXPECT_DOUBLE_EQ(kept.memory, 4 * 16 + 2 * 24);
  // mid and up2 recomputed (one segment of the bottom layer, down2 kept): the segment checkpoints
  // down2's output (2) and rebuilds 4 bytes.
  const StageMemoryPlan bottom = evaluate_stage_memory(ops, 4, 9, context(2), {K, R, R, K, K});
  EXPECT_DOUBLE_EQ(bottom.checkpoint_bytes, 2);
  EXPECT_DOUBLE_EQ(bottom.activation_memory, 2 * (4 + 0 + 8 + 2 + 8) + 4);
  // cat2 recomputed alone (the next layer): it checkpoints up2's output (4) and, of enc2's output,
  // the part its readers here save (down2's 4); the carried skip is the stage input already.
  const StageMemoryPlan joined = evaluate_stage_memory(ops, 4, 9, context(2), {K, K, K, R, K});
  EXPECT_DOUBLE_EQ(joined.checkpoint_bytes, 4 + 4);
  EXPECT_DOUBLE_EQ(joined.activation_memory, 2 * (4 + 2 + 2 + 8 + 8 + 8) + 0);
}

// A received tensor whose readers save less than it: the part they save is counted with them, the
// rest as the stage input; a recompute checkpoint keeps at most the part the readers hold.
TEST(StageMemory, AReceivedTensorIsCountedOnceBetweenItsReadersAndTheStageInput) {
  // a -> b (8 bytes), a -> d (8 bytes): the chain above, with a's output bounded to 8 bytes.
  OperatorTable ops = chain();
  ops.output = {8, 6, 9, 1};
  index_tensors(ops);
  // A stage of c and d: d reads a's 8 bytes and saves 20, taken to include them.
  EXPECT_DOUBLE_EQ(held_input_bytes(ops, 2, 4), 0);
  // d saving 5 of them: 3 are held besides. Kept: k * (30 + 5 + 3). Recomputed, d checkpoints c's
  // output (9, in the stage) and the 5 bytes of a's its own saved bytes covered.
  ops.saved[3] = 5;
  index_tensors(ops);
  EXPECT_DOUBLE_EQ(held_input_bytes(ops, 2, 4), 3);
  EXPECT_DOUBLE_EQ(evaluate_stage_memory(ops, 2, 4, context(2), {K, K}).activation_memory, 2 * (30 + 5 + 3));
  const StageMemoryPlan rebuilt = evaluate_stage_memory(ops, 2, 4, context(2), {K, R});
  EXPECT_DOUBLE_EQ(rebuilt.checkpoint_bytes, 9 + 5);
  EXPECT_DOUBLE_EQ(rebuilt.activation_memory, 2 * (30 + 14 + 3) + 5);
}

TEST(StageMemory, RejectsMismatchedDecisions) {
  EXPECT_THROW(evaluate_stage_memory(chain(), 0, 4, context(1), {K, K}), Error);
  EXPECT_THROW(evaluate_stage_memory(chain(), 2, 5, context(1), {K, K, K}), Error);
}

// Random stages with chains and skip edges.
OperatorTable random_ops(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> time(0.1, 3), bytes(0, 50), edge(1, 30);
  OperatorTable ops;
  for (int v = 0; v < n; ++v) {
    ops.forward.push_back(time(rng));
    ops.backward.push_back(2 * ops.forward.back());
    ops.saved.push_back(rng() % 5 == 0 ? 0 : bytes(rng));
    ops.workspace.push_back(bytes(rng) / 10);
    ops.parameters.push_back(rng() % 3 == 0 ? 1 : 0);
    ops.tied_to.push_back(kNotTied);
    ops.inputs.emplace_back();
    if (v > 0) ops.inputs[v].push_back({v - 1, edge(rng)});
    if (v > 2 && rng() % 3 == 0) ops.inputs[v].push_back({static_cast<int>(rng() % (v - 1)), edge(rng)});
    ops.output.push_back(edge(rng));
    // Half the operators say what they save of each input (as a capture does), within what they save.
    if (rng() % 2 == 0) {
      double left = ops.saved[v];
      for (OperatorTable::InEdge& in : ops.inputs[v]) left -= in.saved = std::min(left, in.bytes * (rng() % 3) / 2);
    }
  }
  return ops;
}

// The least memory over all 2^n keep / recompute assignments.
double least_memory_brute_force(const OperatorTable& ops, int begin, int end, const StageContext& c) {
  const int n = end - begin;
  double best = kInfinity;
  for (int mask = 0; mask < (1 << n); ++mask) {
    std::vector<D> d(n);
    for (int i = 0; i < n; ++i) d[i] = (mask >> i & 1) ? R : K;
    best = std::min(best, evaluate_stage_memory(ops, begin, end, c, d).memory);
  }
  return best;
}

// The least added time over all 3^n assignments that fit, with checkpoints kept or (where
// can_offload_checkpoints, and something is recomputed) offloaded, or infinity.
double brute_force(const OperatorTable& ops, int begin, int end, const StageContext& context) {
  const int n = end - begin;
  std::vector<D> d(n, K);
  double best = kInfinity;
  for (bool offload_checkpoints : {false, true}) {
    if (offload_checkpoints && !can_offload_checkpoints(context)) continue;
    StageContext c = context;
    c.offload_checkpoints = offload_checkpoints;
    auto visit = [&](auto&& self, int i) -> void {
      if (i == n) {
        // Offloading checkpoints needs something recomputed; without, it is the first pass's plan.
        if (offload_checkpoints && std::find(d.begin(), d.end(), R) == d.end()) return;
        const StageMemoryPlan p = evaluate_stage_memory(ops, begin, end, c, d);
        if (p.fits) best = std::min(best, p.added_time());
        return;
      }
      for (D choice : {K, R, O}) {
        d[i] = choice;
        self(self, i + 1);
      }
    };
    visit(visit, 0);
  }
  return best;
}

// One stage: the exact solver's answer against brute force, the least-memory program against brute
// force where nothing offloads, and the greedy never below the optimum. The exact plan when it fits.
std::optional<StageMemoryPlan> expect_solvers_agree(const OperatorTable& ops, int begin, int n, const StageContext& c,
                                                    int trial) {
  const double expected = brute_force(ops, begin, n, c);
  const StageMemoryPlan exact = optimize_stage_memory(ops, begin, n, c, MemorySolver::Exact);
  EXPECT_EQ(exact.fits, expected < kInfinity) << "trial " << trial;
  if (c.host_bandwidth == 0) {
    EXPECT_NEAR(least_stage_memory(ops, begin, n, c).memory, least_memory_brute_force(ops, begin, n, c),
                1e-9 * c.budget)
        << "trial " << trial;
  }
  if (!exact.fits || expected == kInfinity) return std::nullopt;
  EXPECT_NEAR(exact.added_time(), expected, 1e-9 * (1 + expected)) << "trial " << trial;
  EXPECT_LE(exact.memory, c.budget);
  const StageMemoryPlan greedy = optimize_stage_memory(ops, begin, n, c, MemorySolver::Greedy);
  if (greedy.fits) {
    EXPECT_GE(greedy.added_time(), expected - 1e-9) << "trial " << trial;
  }
  return exact;
}

TEST(StageMemory, ExactSolverEqualsBruteForce) {
  std::mt19937 rng(7);
  int feasible = 0, offloading_checkpoints = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 3 + trial % 7;
    OperatorTable ops = random_ops(rng, n);
    if (trial % 5 != 0)
      for (int v = 0; v < n; ++v) ops.layer.push_back(v / (1 + trial % 4));
    const int begin = trial % 2;
    StageContext c = context(1 + trial % 6, 0, trial % 3 == 0 ? 0 : 20, 1 + trial % 4);
    c.split_backward = trial % 4 == 1;
    c.budget =
        evaluate_stage_memory(ops, begin, n, c, std::vector<D>(n - begin, K)).memory * (0.35 + 0.1 * (trial % 6));
    const std::optional<StageMemoryPlan> exact = expect_solvers_agree(ops, begin, n, c, trial);
    if (!exact) continue;
    ++feasible;
    offloading_checkpoints += exact->offload_checkpoints;
  }
  EXPECT_GT(feasible, 100);
  EXPECT_GT(offloading_checkpoints, 10);  // the optimum often offloads them
}

// The same with neighbours that save shared tensors: the dynamic programs must tell a kept, an
// offloaded and a recomputed predecessor apart.
TEST(StageMemory, ExactSolverEqualsBruteForceWithSharedTensors) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> share(0, 1);
  int feasible = 0, sharing_optima = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 3 + trial % 6;
    OperatorTable ops = random_ops(rng, n);
    if (trial % 3 != 0)
      for (int v = 0; v < n; ++v) ops.layer.push_back(v / (2 + trial % 3));
    ops.shared.assign(n, 0);
    for (int v = 1; v < n; ++v)
      if (ops.same_layer(v - 1, v) && rng() % 2 == 0)
        ops.shared[v] = share(rng) * std::min(ops.saved[v - 1], ops.saved[v]);
    const int begin = trial % 2;
    StageContext c = context(1 + trial % 5, 0, trial % 3 == 1 ? 0 : 20, 1 + trial % 4);
    c.split_backward = trial % 4 == 3;
    c.budget = evaluate_stage_memory(ops, begin, n, c, std::vector<D>(n - begin, K)).memory * (0.4 + 0.1 * (trial % 6));
    const std::optional<StageMemoryPlan> exact = expect_solvers_agree(ops, begin, n, c, trial);
    if (!exact) continue;
    ++feasible;
    // Where the optimum holds a shared pair alike, counting the pair twice would cost it memory.
    for (int v = begin + 1; v < n; ++v)
      sharing_optima += ops.shared[v] > 0 && exact->decisions[v - begin] == exact->decisions[v - 1 - begin];
  }
  EXPECT_GT(feasible, 80);
  EXPECT_GT(sharing_optima, 50);
}

}  // namespace
}  // namespace flexpipe
