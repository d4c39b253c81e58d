// The list scheduler against the schedules it should rediscover (1F1B, GPipe, ZB-H1's bubble), its
// memory accounting against the simulator's, and the policies that must stall.
#include <gtest/gtest.h>

#include "flexpipe/ir/memory_actions.h"
#include "flexpipe/search/list_scheduler.h"
#include "flexpipe/validate/validator.h"
#include "schedule_test_helpers.h"

namespace flexpipe {
namespace {

using test::row;
using test::run;

Schedule skeleton(int p, int m, int v = 1) { return make_schedule("list", p, m, loop_placement(p, v * p)); }

std::vector<int> one_f_one_b_depths(int p) {
  std::vector<int> depth;
  for (int d = 0; d < p; ++d) depth.push_back(p - d);
  return depth;
}

// With 1F1B's depths (p - d forwards in flight on device d) and backwards first, the greedy writes
// exactly 1F1B's lists, and its makespan is (m + p - 1)(F + B).
TEST(ListScheduler, RediscoversOneFOneB) {
  for (int p : {2, 4}) {
    const int m = 2 * p;
    Schedule s = skeleton(p, m);
    const CostTable costs = uniform_costs(p, 1, 1, 1);
    ListPolicy policy;
    policy.inflight = one_f_one_b_depths(p);
    ASSERT_TRUE(list_schedule(s, costs, policy));
    const Schedule reference = make_builtin("1f1b", {p, m, 0});
    for (int d = 0; d < p; ++d) EXPECT_EQ(row(s, d), row(reference, d)) << "p=" << p << " device " << d;
    EXPECT_TRUE(validate(s).empty());
    EXPECT_DOUBLE_EQ(run(s, costs).makespan, (m + p - 1) * 3.0);
  }
}

// Forwards first and no limit: every device runs all its forwards before any backward (GPipe), the
// first device holds all m micro-batches, and the makespan is (m + p - 1)(F + B) again.
TEST(ListScheduler, ForwardsFirstIsGPipe) {
  const int p = 3, m = 5;
  Schedule s = skeleton(p, m);
  const CostTable costs = uniform_costs(p, 1, 1, 1);
  ListPolicy policy;
  policy.backward_first = false;
  ASSERT_TRUE(list_schedule(s, costs, policy));
  EXPECT_EQ(row(s, 0), "0F0 0F1 0F2 0F3 0F4 0B0 0B1 0B2 0B3 0B4");
  const SimResult result = run(s, costs);
  EXPECT_DOUBLE_EQ(result.makespan, (m + p - 1) * 3.0);
  EXPECT_DOUBLE_EQ(result.devices[0].peak_memory, m);  // one unit per micro-batch, uniform_costs
}

// Split backward with W filling idle time, at ZB-H1's memory (p micro-batches on every device, the
// most 1F1B holds anywhere): W's deferred on the later devices fill their bubbles, so the step is
// shorter than 1F1B's (m + p - 1)(F + B) = 33 without exceeding p on any device.
TEST(ListScheduler, SplitBackwardFillsBubblesWithinZbH1Memory) {
  const int p = 4, m = 8;
  Schedule s = skeleton(p, m);
  const CostTable costs = uniform_costs(p, 1, 1, 1);
  ListPolicy policy;
  policy.split_backward = true;
  policy.inflight.assign(p, p);
  ASSERT_TRUE(list_schedule(s, costs, policy));
  EXPECT_TRUE(validate(s).empty());
  const SimResult ours = run(s, costs);
  EXPECT_LT(ours.makespan, 3.0 * (m + p - 1));
  for (int d = 0; d < p; ++d) EXPECT_LE(ours.devices[d].peak_memory, p) << d;
  // With the limit counted until W, the in-flight limit is the memory: 1F1B's depths keep 1F1B's peaks.
  policy.inflight = one_f_one_b_depths(p);
  ASSERT_TRUE(list_schedule(s, costs, policy));
  const SimResult shallow = run(s, costs);
  for (int d = 0; d < p; ++d) EXPECT_DOUBLE_EQ(shallow.devices[d].peak_memory, p - d) << d;
}

// A memory capacity alone (no in-flight limit) holds the forwards back: with room for two micro-batches'
// activations per device, the simulator finds every device within it.
TEST(ListScheduler, MemoryCapacityHoldsForwardsBack) {
  const int p = 4, m = 8;
  CostTable costs = uniform_costs(p, 1, 1, 1);
  for (StageCosts& c : costs.stages) c.parameter_bytes = 3;  // static memory counts too
  costs.memory_capacity = {5};
  for (bool split : {false, true}) {
    Schedule s = skeleton(p, m);
    ListPolicy policy;
    policy.split_backward = split;
    policy.backward_first = false;  // greedy for forwards: only memory stops them
    ASSERT_TRUE(list_schedule(s, costs, policy));
    const SimResult result = run(s, costs);
    EXPECT_TRUE(result.fits);
    EXPECT_DOUBLE_EQ(result.devices[0].peak_memory, 5);
    for (int d = 0; d < p; ++d) EXPECT_LE(result.devices[d].peak_memory, 5) << d;
  }
}

// A stage's workspace is held while it computes: the scheduler keeps room for it, so with static 3 and
// workspace 1 a capacity of 5 leaves one micro-batch in flight, and the simulator agrees.
TEST(ListScheduler, MemoryCapacityKeepsRoomForTheWorkspace) {
  const int p = 4, m = 8;
  CostTable costs = uniform_costs(p, 1, 1, 1);
  for (StageCosts& c : costs.stages) c.parameter_bytes = 3, c.workspace_bytes = 1;
  costs.memory_capacity = {5};
  Schedule s = skeleton(p, m);
  ListPolicy policy;
  policy.backward_first = false;
  ASSERT_TRUE(list_schedule(s, costs, policy));
  const SimResult result = run(s, costs);
  EXPECT_TRUE(result.fits);
  for (int d = 0; d < p; ++d) EXPECT_DOUBLE_EQ(result.devices[d].peak_memory, 5) << d;
  // One micro-batch at a time: the forwards never run ahead of the backwards.
  EXPECT_EQ(row(s, 0).substr(0, 11), "0F0 0B0 0F1");
}

// Recomputing stages hold only their checkpoints between F and R, so the same capacity admits more
// forwards; the backward takes R longer. Memory follows the simulator's rules once R is placed.
TEST(ListScheduler, RecomputeCountsCheckpointsAndTime) {
  const int p = 2, m = 4;
  CostTable costs = uniform_costs(p, 1, 1, 1);
  for (StageCosts& c : costs.stages) {
    c.activation_bytes = 4;
    c.checkpoint_bytes = 1;
  }
  costs.memory_capacity = {8};
  const std::vector<char> recompute(p, 1);
  Schedule s = skeleton(p, m);
  ListPolicy policy;
  policy.backward_first = false;
  ASSERT_TRUE(list_schedule(s, costs, policy, recompute));
  // Device 0: four checkpoints (4 bytes), and room kept for one R (4 bytes).
  EXPECT_EQ(row(s, 0), "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3");
  const Schedule with_r = add_memory_actions(s, recompute, {0, 0});
  EXPECT_TRUE(validate(with_r).empty());
  const SimResult result = run(with_r, costs);
  EXPECT_TRUE(result.fits);
  EXPECT_DOUBLE_EQ(result.devices[0].peak_memory, 8);
  // Device 1 runs F at 1..5, then R+B (1 + 2) per micro-batch: gradients reach device 0 at 8, 11, 14, 17.
  // Device 0 recomputes micro-batch 0 while it waits (R at 4-5), then B/R alternate: 8-10, R, 11-13, R,
  // 14-16, R, 17-19.
  EXPECT_DOUBLE_EQ(result.makespan, 19);
}

// Policies that cannot place everything: an in-flight limit of one on a device holding two chunks
// (the second chunk's forward needs a second slot), and memory too small for one activation.
TEST(ListScheduler, ImpossiblePoliciesStall) {
  Schedule s = skeleton(2, 2, 2);
  ListPolicy policy;
  policy.inflight = {1, 1};
  EXPECT_FALSE(list_schedule(s, uniform_costs(4, 1, 1, 1), policy));
  CostTable tiny = uniform_costs(2, 1, 1, 1);
  tiny.memory_capacity = {0.5};
  Schedule t = skeleton(2, 2);
  EXPECT_FALSE(list_schedule(t, tiny, ListPolicy{}));
}

// Transfers delay the consumer by their link time: with a latency of 1 between devices, 1F1B's
// makespan grows by 2 (p - 1) (one transfer each way per boundary on the critical path).
TEST(ListScheduler, TransfersDelayConsumers) {
  const int p = 3, m = 3;
  const CostTable costs = uniform_costs(p, 1, 1, 1, 1.0);
  Schedule s = skeleton(p, m);
  ListPolicy policy;
  policy.inflight = one_f_one_b_depths(p);
  ASSERT_TRUE(list_schedule(s, costs, policy));
  EXPECT_DOUBLE_EQ(run(s, costs).makespan, run(make_builtin("1f1b", {p, m, 0}), costs).makespan);
}

// Two pipelines in opposite directions (DualPipe's placement): each stage runs only its pipeline's
// micro-batches, the lists validate, and the two directions fill each other's bubbles: shorter than
// 1F1B's (m + p - 1)(F + B) on the same devices.
TEST(ListScheduler, SchedulesBidirectionalPipelines) {
  const int p = 4, m = 8;
  Schedule s = make_schedule("bi", p, m, bidirectional_placement(p), 2);
  for (int mb = 0; mb < m; ++mb) s.microbatch_pipeline.push_back(mb < m / 2 ? 0 : 1);
  const CostTable costs = uniform_costs(p, 1, 1, 1);
  ListPolicy policy;
  policy.split_backward = true;
  ASSERT_TRUE(list_schedule(s, costs, policy));
  EXPECT_TRUE(validate(s).empty());
  for (const auto& list : s.device_actions)
    for (const Action& a : list) EXPECT_EQ(s.pipeline_of_stage(a.stage), s.pipeline_of_microbatch(a.microbatch));
  EXPECT_LT(run(s, costs).makespan, 3.0 * (m + p - 1));
}

TEST(ListScheduler, DescribesItsPolicy) {
  ListPolicy policy;
  policy.split_backward = true;
  policy.weight = WeightTiming::Late;
  policy.inflight = {3, 2};
  EXPECT_EQ(describe(policy), "split backward, W late, backward first, oldest forward, in flight [3,2]");
  EXPECT_EQ(describe(ListPolicy{}), "whole backward, backward first, oldest forward, in flight limited by memory");
}

}  // namespace
}  // namespace flexpipe
