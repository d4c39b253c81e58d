// The lower bound of a placement (schedule_bound.h): hand-computed cases, never above the exact
// optimum over every per-device order, never above any built-in's simulation.
#include "flexpipe/search/bound.h"

#include <gtest/gtest.h>

#include <random>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/search/exact_schedule.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

// The lower bound on hand-computed cases: uniform F = I = W = 1 on p = 4, m = 8 with a split backward
// is 27 (the last device waits 3 for its first input, then works 24), which ZB-H1 reaches, so it is
// tight. With a whole backward (B = 2) the closed-form terms still give 27, but the last device's
// preemptive schedule sees that its last B is followed by 3 B's below it: 33 = 3 + 8 (F + B) + 3 x 2,
// which 1F1B reaches, (m + p - 1)(F + B).
TEST(ScheduleBound, HandComputedCases) {
  const Schedule skeleton = make_schedule("x", 4, 8, loop_placement(4, 4));
  const CostTable costs = uniform_costs(4, 1, 1, 1);
  EXPECT_DOUBLE_EQ(schedule_lower_bound(skeleton, costs, true), 27);
  EXPECT_DOUBLE_EQ(simulate(lower(make_builtin("zb-h1", {4, 8, 0})), costs).makespan, 27);
  EXPECT_DOUBLE_EQ(schedule_path_bound(skeleton, costs, false), 27);
  EXPECT_DOUBLE_EQ(schedule_lower_bound(skeleton, costs, false), 33);
  EXPECT_DOUBLE_EQ(simulate(lower(make_builtin("1f1b", {4, 8, 0})), costs).makespan, 33);
  // Transfers of 1 each way: device 3's first input arrives at 3 + 3, so 6 + 24.
  EXPECT_DOUBLE_EQ(schedule_lower_bound(skeleton, uniform_costs(4, 1, 1, 1, 1.0), true), 30);
  // A recompute (R = F = 1) on every stage adds 8 to each device's work, nothing to the paths.
  EXPECT_DOUBLE_EQ(schedule_lower_bound(skeleton, costs, true, std::vector<char>(4, 1)), 35);
  // m = 1: one micro-batch's way up (4), down (4 I's) and its W at stage 0.
  EXPECT_DOUBLE_EQ(schedule_lower_bound(make_schedule("x", 4, 1, loop_placement(4, 4)), costs, true), 9);
}

// The bound is a bound: on random small instances (unequal stages, transfers, loop and V placements)
// it never exceeds the exact optimum over every per-device order.
TEST(ScheduleBound, NeverExceedsTheExactOptimum) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> time(0.5, 3), comm(0, 1);
  for (int trial = 0; trial < 40; ++trial) {
    const int p = 2 + trial % 2, m = 2 + trial % 3;
    const bool v_shape = trial % 4 == 3;
    const int stages = v_shape ? 2 * p : p;
    CostTable costs = uniform_costs(stages, 1, 1, 1, comm(rng));
    for (StageCosts& c : costs.stages) {
      c.forward = time(rng);
      c.backward_input = time(rng);
      c.backward_weight = time(rng);
      c.backward = c.backward_input + c.backward_weight;
    }
    const Schedule skeleton = make_schedule("x", p, m, v_shape ? v_placement(p, stages) : loop_placement(p, stages));
    for (bool split : {false, true}) {
      const ExactResult exact = exact_schedule(skeleton, costs, split);
      ASSERT_TRUE(exact.proven_optimal) << trial;
      const double bound = schedule_lower_bound(skeleton, costs, split);
      EXPECT_LE(bound, exact.makespan * (1 + 1e-12)) << trial << " " << split;
      EXPECT_LE(schedule_path_bound(skeleton, costs, split), bound * (1 + 1e-12)) << trial << " " << split;
    }
  }
}

// And on larger instances, where no exact optimum is at hand: every built-in (loops of 1 to 4
// chunks, V shapes, DualPipe's two pipelines, split or whole backwards) under random unequal stage
// costs and transfers simulates to no less than the bound of its own placement.
TEST(ScheduleBound, NeverExceedsAnyBuiltin) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> time(0.5, 3), comm(0, 1);
  int checked = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int p = 2 + 2 * (trial % 3), m = p * (1 + trial % 2);
    for (const BuiltinSchedule& builtin : builtin_schedules()) {
      Schedule schedule;
      try {
        schedule = make_builtin(builtin.name, {p, m, 0});
      } catch (const Error&) {
        continue;  // not defined at this p and m
      }
      CostTable costs = uniform_costs(schedule.stages_per_pipeline, 1, 1, 1, comm(rng));
      for (StageCosts& c : costs.stages) {
        c.forward = time(rng);
        c.backward_input = time(rng);
        c.backward_weight = time(rng);
        c.backward = c.backward_input + c.backward_weight;
        c.recompute = c.forward;
      }
      bool split = false;
      for (const auto& list : schedule.device_actions)
        for (const Action& a : list) split |= a.kind == ActionKind::I;
      EXPECT_LE(schedule_lower_bound(schedule, costs, split), simulate(lower(schedule), costs).makespan * (1 + 1e-12))
          << builtin.name << " p=" << p << " m=" << m;
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

}  // namespace
}  // namespace flexpipe
