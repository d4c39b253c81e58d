// The built-in ranking behind `train --schedule auto`: every candidate is the simulator's verdict on
// that schedule, the order is fastest first, and what cannot run is set apart with its reason.
#include <gtest/gtest.h>

#include "flexpipe/core/builtin_schedules.h"
#include "flexpipe/core/lowering.h"
#include "flexpipe/core/schedule_choice.h"
#include "flexpipe/core/simulator.h"
#include "flexpipe/core/trainable_model.h"

namespace flexpipe {
namespace {

TEST(ScheduleChoice, RanksEveryBuiltinBySimulatedTime) {
  const CostGraph graph = trainable_graph(gpt_config({4, 64, 4, 64, 64}), 4);
  AggregationOptions aggregation;
  aggregation.shape = graph.reference;
  const auto ranked = rank_builtin_schedules(graph, 3, 6, aggregation);
  ASSERT_EQ(ranked.size(), builtin_schedules().size());
  // DualPipe needs an even device count: it is last, with the reason.
  EXPECT_EQ(ranked.back().name, "dualpipe");
  EXPECT_NE(ranked.back().skipped.find("even number of devices"), std::string::npos) << ranked.back().skipped;
  for (size_t i = 0; i + 1 < ranked.size(); ++i) {
    if (!ranked[i + 1].skipped.empty()) break;
    EXPECT_LE(ranked[i].makespan, ranked[i + 1].makespan) << ranked[i].name << " before " << ranked[i + 1].name;
  }
  // Each figure is the simulator's for that schedule, partitioned the same way.
  const ScheduleCandidate& best = ranked.front();
  const Schedule schedule = make_builtin(best.name, {3, 6, 0});
  const CostTable costs =
      aggregate_stages(graph, partition_balanced(graph, schedule.stages_per_pipeline), aggregation).table;
  EXPECT_DOUBLE_EQ(simulate(lower(schedule), costs).makespan, best.makespan);
  // Zero-bubble schedules beat GPipe on any balanced model.
  auto position = [&](const std::string& name) {
    return std::find_if(ranked.begin(), ranked.end(), [&](const auto& c) { return c.name == name; }) - ranked.begin();
  };
  EXPECT_LT(position("zb-h2"), position("gpipe"));
}

TEST(ScheduleChoice, WhatDoesNotFitComesAfterWhatDoes) {
  const CostGraph graph = trainable_graph(gpt_config({4, 64, 4, 64, 64}), 4);
  AggregationOptions aggregation;
  aggregation.shape = graph.reference;
  const auto unlimited = rank_builtin_schedules(graph, 4, 8, aggregation);
  // A capacity between the lowest and the highest peak: some fit, some do not.
  double low = 1e300, high = 0;
  for (const auto& c : unlimited)
    if (c.skipped.empty()) {
      low = std::min(low, c.peak_memory);
      high = std::max(high, c.peak_memory);
    }
  ASSERT_LT(low, high);
  aggregation.memory_capacity = {(low + high) / 2};
  const auto limited = rank_builtin_schedules(graph, 4, 8, aggregation);
  bool seen_misfit = false;
  for (const auto& c : limited) {
    if (!c.skipped.empty()) break;
    if (!c.fits) seen_misfit = true;
    else EXPECT_FALSE(seen_misfit) << c.name << " fits but comes after one that does not";
  }
  EXPECT_TRUE(seen_misfit);
  EXPECT_TRUE(limited.front().fits);
}

}  // namespace
}  // namespace flexpipe
