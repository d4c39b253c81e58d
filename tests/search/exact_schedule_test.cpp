// Tests of exact branch and bound: brute force on tiny instances, hand-computed optima, memory.
#include "flexpipe/search/exact_schedule.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe {
namespace {

constexpr double kTolerance = 1e-9;

Schedule skeleton(int p, int m) { return make_schedule("exact", p, m, loop_placement(p, p)); }

SimResult run(const Schedule& schedule, const CostTable& costs) { return simulate(lower(schedule), costs); }

// The independent oracle: every per-device order that keeps each (stage, kind)'s micro-batches in
// increasing order, simulated one by one; orders the simulator refuses (deadlock) or that do not fit
// are skipped. Returns the least makespan, infinity when nothing runs.
struct BruteForce {
  double best = kInfinity;
  int64_t schedules = 0;  // complete schedules simulated
  int64_t runnable = 0;   // of which ran and fit
};

// Each device's candidate orders. Dependencies between actions of one device are kept here (an
// order that breaks one would only deadlock); the ones across devices are left to the simulator.
void device_orders(const Schedule& shape, int device, bool split, std::vector<int>& count, std::vector<Action>& order,
                   std::vector<std::vector<Action>>& out) {
  const int m = shape.num_microbatches;
  const int kinds = split ? 3 : 2;
  const std::vector<int> stages = stages_on_device(shape, device);
  if (order.size() == stages.size() * static_cast<size_t>(m * kinds)) {
    out.push_back(order);
    return;
  }
  auto local_done = [&](int stage, int kind, int microbatch) {
    return stage < 0 || stage >= shape.num_stages() || shape.stage_device[stage] != device ||
           count[stage * 3 + kind] > microbatch;
  };
  for (int stage : stages)
    for (int kind = 0; kind < kinds; ++kind) {
      const int mb = count[stage * 3 + kind];
      if (mb == m) continue;
      bool ready = true;
      if (kind == 0) ready = local_done(stage - 1, 0, mb);
      if (kind == 1) ready = count[stage * 3] > mb && local_done(stage + 1, 1, mb);
      if (kind == 2) ready = count[stage * 3 + 1] > mb;
      if (!ready) continue;
      static constexpr ActionKind kSplit[] = {ActionKind::F, ActionKind::I, ActionKind::W};
      order.push_back(Action::make(split ? kSplit[kind] : (kind == 0 ? ActionKind::F : ActionKind::B), stage, mb));
      ++count[stage * 3 + kind];
      device_orders(shape, device, split, count, order, out);
      --count[stage * 3 + kind];
      order.pop_back();
    }
}

BruteForce brute_force(const Schedule& shape, const CostTable& costs, bool split) {
  std::vector<std::vector<std::vector<Action>>> per_device(shape.num_devices);
  for (int d = 0; d < shape.num_devices; ++d) {
    std::vector<int> count(shape.num_stages() * 3, 0);
    std::vector<Action> order;
    device_orders(shape, d, split, count, order, per_device[d]);
  }
  BruteForce result;
  Schedule schedule = shape;
  std::function<void(int)> choose = [&](int device) {
    if (device == shape.num_devices) {
      ++result.schedules;
      try {
        const SimResult sim = simulate(lower(schedule), costs, SimOptions{false, false});
        if (!sim.fits) return;
        ++result.runnable;
        result.best = std::min(result.best, sim.makespan);
      } catch (const Error&) {  // deadlocked: not a schedule
      }
      return;
    }
    for (const auto& order : per_device[device]) {
      schedule.device_actions[device] = order;
      choose(device + 1);
    }
  };
  choose(0);
  return result;
}

// The checks every result must pass: valid, compute-only, fits, and its makespan is the simulator's.
void expect_sound(const ExactResult& result, const CostTable& costs, bool split) {
  ASSERT_TRUE(result.found);
  const std::vector<Diagnostic> diagnostics = validate(result.schedule);
  for (const Diagnostic& diagnostic : diagnostics) ADD_FAILURE() << diagnostic.to_string();
  EXPECT_FALSE(result.schedule.has_communication());
  for (const auto& list : result.schedule.device_actions)
    for (const Action& action : list) {
      EXPECT_TRUE(action.kind == ActionKind::F ||
                  (split ? action.kind == ActionKind::I || action.kind == ActionKind::W : action.kind == ActionKind::B))
          << to_string(action);
    }
  const SimResult sim = run(result.schedule, costs);
  EXPECT_TRUE(sim.fits);
  EXPECT_DOUBLE_EQ(result.makespan, sim.makespan);
}

struct OracleCase {
  std::string name;
  Schedule shape;
  CostTable costs;
  bool split;
};

CostTable unequal_costs(int stages) {
  CostTable costs = uniform_costs(stages, 1, 1, 1);
  for (int s = 0; s < stages; ++s) {
    StageCosts& stage = costs.stages[s];
    stage.forward = 1 + 0.5 * s;
    stage.backward_input = 2 - 0.25 * s;
    stage.backward_weight = 0.75 + 0.5 * (s % 2);
    stage.backward = stage.backward_input + stage.backward_weight + 0.25;
    stage.activation_bytes = 2 + s;
    stage.freed_by_input = 1;
    stage.parameter_bytes = 1;
  }
  return costs;
}

std::vector<OracleCase> oracle_cases() {
  std::vector<OracleCase> cases;
  for (int m : {2, 3})
    for (bool split : {false, true}) {
      const std::string tag = fmt::format("p2m{}{}", m, split ? "split" : "");
      cases.push_back({tag + " uniform", skeleton(2, m), uniform_costs(2, 1, 1, 1), split});
      cases.push_back({tag + " unequal", skeleton(2, m), unequal_costs(2), split});
      // Transfers longer than a forward queue on the link's FIFO.
      cases.push_back({tag + " slow link", skeleton(2, m), uniform_costs(2, 1, 2, 1, 1.5), split});
      // Static 1 and activations 2 and 3: two micro-batches in flight on device 0 and one on device 1
      // (binding with split backward only), then one on each (binding in every case).
      CostTable tight = unequal_costs(2);
      tight.memory_capacity = {1 + 2 * 2, 1 + 3};
      cases.push_back({tag + " memory 2/1", skeleton(2, m), tight, split});
      tight.memory_capacity = {1 + 2, 1 + 3};
      cases.push_back({tag + " memory 1/1", skeleton(2, m), tight, split});
    }
  cases.push_back({"p3m2split", skeleton(3, 2), unequal_costs(3), true});
  // A V placement: each device holds two stages, the turn at device 1 needs no transfer.
  CostTable v_costs = unequal_costs(4);
  v_costs.link = Link{0.5, kInfinity};
  cases.push_back({"v p2m2", make_schedule("exact", 2, 2, v_placement(2, 4)), v_costs, false});
  return cases;
}

TEST(ExactScheduleTest, MatchesBruteForceOnTinyInstances) {
  for (const OracleCase& c : oracle_cases()) {
    SCOPED_TRACE(c.name);
    const BruteForce oracle = brute_force(c.shape, c.costs, c.split);
    ASSERT_GT(oracle.runnable, 0);
    const ExactResult exact = exact_schedule(c.shape, c.costs, c.split);
    EXPECT_TRUE(exact.proven_optimal);
    expect_sound(exact, c.costs, c.split);
    EXPECT_NEAR(exact.makespan, oracle.best, kTolerance)
        << oracle.schedules << " orders, " << oracle.runnable << " runnable";
  }
}

TEST(ExactScheduleTest, UniformOptimaByHand) {
  // Whole backward, F = 1, B = 2, no communication: device 1 starts at p - 1 = 1, works m(F + B) and
  // is followed by one more B on device 0, so (m + p - 1)(F + B) is a bound that 1F1B reaches.
  for (int m : {2, 3}) {
    const CostTable costs = uniform_costs(2, 1, 1, 1);
    const ExactResult exact = exact_schedule(skeleton(2, m), costs, false);
    expect_sound(exact, costs, false);
    EXPECT_TRUE(exact.proven_optimal);
    EXPECT_DOUBLE_EQ(exact.makespan, (m + 1) * 3.0);
  }
  // Split, F = I = W = 1: device 1 starts at 1 and works 6, ending with a W that nothing waits
  // for; 0F0 0F1 0I0 0W0 0I1 0W1 / 1F0 1I0 1F1 1I1 1W0 1W1 ends at 7.
  const CostTable costs = uniform_costs(2, 1, 1, 1);
  const ExactResult exact = exact_schedule(skeleton(2, 2), costs, true);
  expect_sound(exact, costs, true);
  EXPECT_TRUE(exact.proven_optimal);
  EXPECT_DOUBLE_EQ(exact.makespan, 7);
}

TEST(ExactScheduleTest, MemoryCapacityRaisesTheOptimum) {
  // With room for one activation per device, micro-batches cannot overlap at all: each one's whole
  // chain (F F B B = 6, or F F I I W = 5 with the activation held until W) runs alone.
  struct Case {
    int m;
    bool split;
    double unlimited, one_in_flight;
  };
  for (const Case& c : {Case{2, false, 9, 12}, Case{3, false, 12, 18}, Case{2, true, 7, 10}}) {
    SCOPED_TRACE(fmt::format("m={} split={}", c.m, c.split));
    CostTable costs = uniform_costs(2, 1, 1, 1);
    const ExactResult free_memory = exact_schedule(skeleton(2, c.m), costs, c.split);
    EXPECT_DOUBLE_EQ(free_memory.makespan, c.unlimited);
    costs.memory_capacity = {1};
    const ExactResult limited = exact_schedule(skeleton(2, c.m), costs, c.split);
    expect_sound(limited, costs, c.split);
    EXPECT_TRUE(limited.proven_optimal);
    EXPECT_DOUBLE_EQ(limited.makespan, c.one_in_flight);
    EXPECT_NEAR(limited.makespan, brute_force(skeleton(2, c.m), costs, c.split).best, kTolerance);
    EXPECT_DOUBLE_EQ(run(limited.schedule, costs).devices[0].peak_memory, 1);
  }
  // Nothing fits when the static memory alone exceeds the capacity: the search proves it.
  CostTable costs = uniform_costs(2, 1, 1, 1);
  costs.stages[1].parameter_bytes = 5;
  costs.memory_capacity = {4};
  const ExactResult none = exact_schedule(skeleton(2, 2), costs, false);
  EXPECT_FALSE(none.found);
  EXPECT_TRUE(none.proven_optimal);
  EXPECT_EQ(none.makespan, kInfinity);
}

TEST(ExactScheduleTest, UpperBoundOnlyAcceptsStrictlyBetter) {
  const CostTable costs = uniform_costs(2, 1, 1, 1);
  ExactOptions options;
  options.upper_bound = 9;  // the optimum itself: nothing strictly better exists
  const ExactResult none = exact_schedule(skeleton(2, 2), costs, false, options);
  EXPECT_FALSE(none.found);
  EXPECT_TRUE(none.proven_optimal);
  options.upper_bound = 9.5;
  const ExactResult better = exact_schedule(skeleton(2, 2), costs, false, options);
  EXPECT_TRUE(better.found);
  EXPECT_DOUBLE_EQ(better.makespan, 9);
}

// Unequal stages, slow links and tight memory: an instance whose proof takes millions of nodes.
CostTable hard_costs(int stages) {
  CostTable costs = uniform_costs(stages, 1, 1, 1, 0.5);
  for (int s = 0; s < stages; ++s) {
    costs.stages[s].forward = 1 + 0.25 * s;
    costs.stages[s].backward_input = 1 + 0.25 * s;
  }
  costs.memory_capacity = {4};
  return costs;
}

TEST(ExactScheduleTest, TimeLimitReturnsAnIncumbent) {
  const CostTable costs = hard_costs(4);
  ExactOptions options;
  options.time_limit_seconds = 0;  // stops at the first check, after the first dive
  const ExactResult result = exact_schedule(skeleton(4, 8), costs, true, options);
  // The limit is checked every 4096 nodes: the search stopped at the first check, far from the
  // 2.7 million nodes this instance needs to be proved (counts, not wall time, so it cannot flake).
  EXPECT_LE(result.nodes, 2 * 4096);
  EXPECT_FALSE(result.proven_optimal);
  expect_sound(result, costs, true);
}

TEST(ExactScheduleTest, MemoOnlySpeedsTheSearchUp) {
  const CostTable costs = hard_costs(4);
  const ExactResult with_memo = exact_schedule(skeleton(4, 5), costs, true);
  ExactOptions options;
  options.memo_megabytes = 0;
  const ExactResult without = exact_schedule(skeleton(4, 5), costs, true, options);
  ASSERT_TRUE(with_memo.proven_optimal);
  ASSERT_TRUE(without.proven_optimal);
  expect_sound(with_memo, costs, true);
  EXPECT_DOUBLE_EQ(with_memo.makespan, without.makespan);
  EXPECT_LT(with_memo.nodes, without.nodes);
}

TEST(ExactScheduleTest, NoBuiltinBeatsTheOptimum) {
  const CostTable costs = uniform_costs(4, 1, 1, 1);
  for (int m : {4, 6}) {
    SCOPED_TRACE(fmt::format("p=4 m={}", m));
    const ExactResult exact = exact_schedule(skeleton(4, m), costs, true);
    expect_sound(exact, costs, true);
    EXPECT_TRUE(exact.proven_optimal);
    // Device 3 cannot start before 3 and has 3m units of work: 15 for m = 4, 21 for m = 6.
    EXPECT_DOUBLE_EQ(exact.makespan, 3 + 3 * m);
    for (const char* name : {"1f1b", "zb-h1", "zb-h2"}) {
      const double builtin = run(make_builtin(name, {4, m, 0}), costs).makespan;
      EXPECT_LE(exact.makespan, builtin + kTolerance) << name;
    }
    // A built-in's memory as the capacity: the built-in itself is in the space, so it is no better.
    for (const char* name : {"1f1b", "zb-h1", "zb-h2"}) {
      const bool split = std::string(name) != "1f1b";
      const SimResult builtin = run(make_builtin(name, {4, m, 0}), costs);
      CostTable limited = costs;
      limited.memory_capacity.clear();
      for (const DeviceReport& device : builtin.devices) limited.memory_capacity.push_back(device.peak_memory);
      const ExactResult bounded = exact_schedule(skeleton(4, m), limited, split);
      expect_sound(bounded, limited, split);
      EXPECT_TRUE(bounded.proven_optimal);
      EXPECT_LE(bounded.makespan, builtin.makespan + kTolerance) << name;
    }
  }
}

TEST(ExactScheduleTest, RejectsWhatItCannotSearch) {
  const CostTable costs = uniform_costs(2, 1, 1, 1);
  Schedule two_pipelines = make_schedule("dual", 2, 2, bidirectional_placement(2), 2);
  EXPECT_THROW(exact_schedule(two_pipelines, uniform_costs(2, 1, 1, 1), false), Error);
  Schedule with_actions = skeleton(2, 2);
  with_actions.device_actions[0].push_back(Action::make(ActionKind::F, 0, 0));
  EXPECT_THROW(exact_schedule(with_actions, costs, false), Error);
  EXPECT_THROW(exact_schedule(skeleton(2, 2), uniform_costs(3, 1, 1, 1), false), Error);
  CostTable allocating_w = costs;
  allocating_w.stages[0].freed_by_input = 2;  // more than the activation: W's end would allocate
  EXPECT_THROW(exact_schedule(skeleton(2, 2), allocating_w, true), Error);
  EXPECT_NO_THROW(exact_schedule(skeleton(2, 2), allocating_w, false));
  try {
    exact_schedule(two_pipelines, costs, false);
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("single pipeline"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace flexpipe
