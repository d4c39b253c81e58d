// The search from a per-stage cost table: the placements its stage count allows, recompute and
// offload only where it gives their costs, and the families and memory actions a caller leaves out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/search/search.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe {
namespace {

// Slightly unequal stages, a latency per transfer, one activation unit per micro-batch.
CostTable table_of(int stages) {
  CostTable costs = uniform_costs(stages, 1, 1.2, 0.8, 0.05);
  for (int k = 0; k < stages; ++k) costs.stages[k].forward = 1 + 0.1 * (k % 3);
  return costs;
}

SearchProblem problem_of(const CostTable& costs, int p, int m, std::vector<char> recompute = {}, bool offload = false) {
  SearchProblem problem;
  if (recompute.empty()) recompute.assign(costs.stages.size(), 0);
  problem.stage_costs = StageCostProblem{"table.json", costs, recompute, offload};
  problem.devices = p;
  problem.batches = {{m, 1}};
  return problem;
}

SearchResult search(const SearchProblem& problem) {
  SearchOptions options;
  options.time_budget = kInfinity;  // these searches end on their own: `exhausted` must not depend on speed
  options.threads = 1;
  options.exact = false;  // branch and bound is tested apart; here it would take most of the time
  return search_schedules(problem, options);
}

int count(const Schedule& s, ActionKind kind, int stage) {
  int n = 0;
  for (const auto& list : s.device_actions)
    for (const Action& a : list) n += a.kind == kind && a.stage == stage;
  return n;
}

void expect_sound(const SearchResult& r) {
  ASSERT_TRUE(r.found);
  EXPECT_TRUE(validate(r.best.schedule).empty());
  const SimResult sim = simulate(lower(r.best.schedule), r.best.costs);
  EXPECT_DOUBLE_EQ(sim.makespan, r.best.makespan);
  EXPECT_TRUE(sim.fits);
}

// p entries: one stage per device (or the bidirectional pair); 2p: the V or two per device; 3p: three
// per device. The answer always has the table's stages, and built-ins with others are skipped.
TEST(CostTableSearch, SearchesThePlacementsItsStageCountAllows) {
  const int p = 2, m = 6;
  for (int per_device : {1, 2, 3}) {
    const SearchResult r = search(problem_of(table_of(per_device * p), p, m));
    expect_sound(r);
    EXPECT_EQ(r.best.schedule.stages_per_pipeline, per_device * p) << per_device;
    EXPECT_TRUE(r.exhausted);
    for (const ScheduleCandidateReport& b : r.builtins)
      if (b.skipped.empty()) {
        EXPECT_EQ(b.schedule.stages_per_pipeline, per_device * p) << b.name;
      }
  }
  SearchProblem only_v = problem_of(table_of(2 * p), p, m);
  only_v.max_chunks = 1;
  only_v.single_stage_loop = false;
  const SearchResult v = search(only_v);
  expect_sound(v);
  EXPECT_EQ(v.best.schedule.stage_device, v_placement(p, 2 * p));
  EXPECT_THROW(search(problem_of(table_of(3), p, m)), Error);  // 3 stages on 2 devices: no placement
}

// Memory for one micro-batch's activations (4) and a few checkpoints on each device: keeping
// everything runs one micro-batch at a time, so recomputing pays; the table gives R's cost on stage
// 0 only, so only stage 0 recomputes, and without a host link nothing offloads.
TEST(CostTableSearch, RecomputesAndOffloadsOnlyWhereTheTableGivesTheirCosts) {
  const int p = 2, m = 6;
  CostTable costs = table_of(p);
  for (StageCosts& s : costs.stages) {
    s.activation_bytes = 4;
    s.checkpoint_bytes = 0.25;
  }
  costs.memory_capacity = {5.5};
  const SearchResult kept = search(problem_of(costs, p, m));
  expect_sound(kept);
  const SearchResult stage0 = search(problem_of(costs, p, m, {1, 0}));
  expect_sound(stage0);
  EXPECT_GT(count(stage0.best.schedule, ActionKind::R, 0), 0);
  EXPECT_EQ(count(stage0.best.schedule, ActionKind::R, 1), 0);
  EXPECT_LT(stage0.best.makespan, kept.best.makespan);
  for (int k = 0; k < p; ++k) EXPECT_EQ(count(stage0.best.schedule, ActionKind::Offload, k), 0);
  // The caller may leave recompute out even where the table allows it.
  SearchProblem no_recompute = problem_of(costs, p, m, {1, 1});
  no_recompute.recompute = false;
  const SearchResult without = search(no_recompute);
  expect_sound(without);
  EXPECT_EQ(count(without.best.schedule, ActionKind::R, 0) + count(without.best.schedule, ActionKind::R, 1), 0);
  EXPECT_DOUBLE_EQ(without.best.makespan, kept.best.makespan);
}

// DualPipe's overlapped F&B units (overlap_ratio 0.6) make the built-in the fastest; without the
// bidirectional family it is reported but not the answer, which stays on one pipeline.
TEST(CostTableSearch, ABuiltinOutsideTheFamiliesIsNotTheAnswer) {
  const int p = 4, m = 8;
  CostTable costs = table_of(p);
  costs.overlap_ratio = 0.6;
  SearchProblem problem = problem_of(costs, p, m);
  const SearchResult all = search(problem);
  expect_sound(all);
  EXPECT_EQ(all.best.family, "built-in dualpipe");
  problem.bidirectional = false;
  const SearchResult one_pipeline = search(problem);
  expect_sound(one_pipeline);
  EXPECT_EQ(one_pipeline.best.schedule.num_pipelines, 1);
  EXPECT_GT(one_pipeline.best.makespan, all.best.makespan);
}

// Nothing fits: the message counts in the table's units and says which memory actions it tried, those
// the table gives costs for and the caller did not leave out.
TEST(CostTableSearch, SaysWhatWouldBeNeededInTheTablesTerms) {
  CostTable costs = table_of(2);
  costs.memory_capacity = {0.5};
  costs.memory_unit = "GB";
  const auto starts = [&](const SearchProblem& problem, const std::string& prefix) {
    const SearchResult r = search(problem);
    EXPECT_FALSE(r.found);
    EXPECT_TRUE(r.infeasible.starts_with(prefix)) << r.infeasible;
  };
  starts(problem_of(costs, 2, 4),
         "no schedule fits 0.5 GB per device: even with everything kept (where the cost table gives their costs) "
         "and one");
  costs.host_link = Link{0.1, 40};
  starts(problem_of(costs, 2, 4, {1, 0}, true),
         "no schedule fits 0.5 GB per device: even with 1 of 2 stages recomputing, 1 offloading (where the cost "
         "table gives their costs) and one");
  SearchProblem no_offload = problem_of(costs, 2, 4, {1, 0}, true);
  no_offload.offload = false;
  starts(no_offload,
         "no schedule fits 0.5 GB per device: even with 1 of 2 stages recomputing (the memory actions searched) "
         "and one");
}

}  // namespace
}  // namespace flexpipe
