// Measured action times become a SimResult the views can draw, and a cost table the simulator can
// predict from; both checked on hand-made timings.
#include <gtest/gtest.h>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"
#include "flexpipe/train/measured_timeline.h"

namespace flexpipe {
namespace {

// GPipe on 2 devices, 1 micro-batch, lowered: d0 = F0 SEND_F0 RECV_B0 B0, d1 = RECV_F0 F0 B0 SEND_B0.
Schedule tiny() { return lower(make_builtin("gpipe", {2, 1})); }

// d0: F0 [0,2], SEND_F0 [2,2.5], RECV_B0 [2.5,2.6], B0 waits 3.4 then [6,10]. d1: RECV_F0 [0,0.1],
// F0 waits 2.5 then [2.6,4.5], B0 [4.5,8.5], SEND_B0 [8.5,8.6].
MeasuredStep timings() {
  return {{{0, 0, 2, 0}, {1, 2, 2.5, 0}, {2, 2.5, 2.6, 0}, {3, 2.6, 10, 3.4}},
          {{0, 0, 0.1, 0}, {1, 0.1, 4.5, 2.5}, {2, 4.5, 8.5, 0}, {3, 8.5, 8.6, 0}}};
}

TEST(MeasuredTimeline, IntervalsStartAfterTheWaitAndOnlyComputeIsBusy) {
  const Schedule s = tiny();
  ASSERT_EQ(s.device_actions[0].size(), 4u);
  ASSERT_EQ(s.action_name(s.device_actions[0][3]), "0B0");
  const SimResult r = measured_result(s, timings());
  EXPECT_DOUBLE_EQ(r.makespan, 10);
  EXPECT_DOUBLE_EQ(r.timeline[0][3].start, 6);  // 2.6 + 3.4 waited for the gradient
  EXPECT_DOUBLE_EQ(r.timeline[1][1].start, 2.6);
  EXPECT_DOUBLE_EQ(r.devices[0].busy, 2 + 4);    // F 2, B 4
  EXPECT_DOUBLE_EQ(r.devices[1].busy, 1.9 + 4);  // F 1.9, B 4
  EXPECT_DOUBLE_EQ(r.bubble_ratio, (20 - 11.9) / 20);
}

TEST(MeasuredTimeline, CostsAreMeanTimesPerChunkOverTheSteps) {
  const Schedule s = tiny();
  // A second step: d0's F 4, d1's F 1.5 and B 3, d0's B waits 5 (until 9.6) and takes 4.6; a third
  // as the first.
  MeasuredStep slower = timings();
  slower[0][0].end = 4, slower[0][1] = {1, 4, 4.5, 0}, slower[0][2] = {2, 4.5, 4.6, 0};
  slower[0][3] = {3, 4.6, 14.2, 5};
  slower[1][1] = {1, 0.1, 6.1, 4.5};
  slower[1][2] = {2, 6.1, 9.1, 0}, slower[1][3] = {3, 9.1, 9.2, 0};
  const CostTable c = measured_costs(s, {timings(), slower, timings()});
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(c.stages[0].forward, (2 + 4 + 2) / 3.0);
  EXPECT_DOUBLE_EQ(c.stages[0].backward, (4 + 4.6 + 4) / 3);
  EXPECT_DOUBLE_EQ(c.stages[1].forward, (1.9 + 1.5 + 1.9) / 3);
  EXPECT_DOUBLE_EQ(c.stages[1].backward_input, (4 + 3 + 4) / 6.0);  // never split: half of B each
  EXPECT_DOUBLE_EQ(c.stages[1].recompute, c.stages[1].forward);
  EXPECT_DOUBLE_EQ(c.link.send_cpu, 0.3);  // sends 0.5 0.1 0.5 0.1 0.5 0.1
  EXPECT_DOUBLE_EQ(c.link.receive_cpu, 0.1);
  EXPECT_DOUBLE_EQ(c.overlap_ratio, 1);  // no OVERLAP ran
  // In flight forward: 2.6 - 2.5, 4.6 - 4.5, 0.1 again; backward: F0's gradient left d1 at 8.6
  // and d0 had it at 6 (the made-up first step's clocks disagree: -2.6), then 9.6 - 9.2 = 0.4, -2.6.
  // Medians 0.1 and -2.6 average to less than nothing: no latency.
  EXPECT_DOUBLE_EQ(c.link.latency, 0);
  EXPECT_DOUBLE_EQ(c.link.bandwidth, kInfinity);
  // With consistent clocks: B0 on d0 waits until 9 (0.4 after the gradient left): latency 0.25.
  MeasuredStep consistent = timings();
  consistent[0][3] = {3, 2.6, 13, 6.4};
  const CostTable d = measured_costs(s, {consistent});
  EXPECT_DOUBLE_EQ(d.link.latency, (0.1 + 0.4) / 2);
  EXPECT_DOUBLE_EQ(d.link.send_cpu, (0.5 + 0.1) / 2);
  // The simulator then predicts the step: d0 F0 [0,2] SEND [2,2.3] -> 2.55; d1 RECV [0,0.1], F0
  // [2.55,4.45], B0 [4.45,8.45], SEND [8.45,8.75] -> 9; d0 B0 [9,13]: the measured 13.
  const SimResult predicted = simulate(s, d);
  EXPECT_DOUBLE_EQ(predicted.makespan, 13);
  // Simulated, each device's step: d0 computes 2 + 4, spends 0.3 + 0.1 on transfers, waits the rest;
  // d1 computes 1.9 + 4 and also spends 0.1 + 0.3.
  const std::vector<TimeBreakdown> simulated = simulated_breakdown(s, predicted);
  ASSERT_EQ(simulated.size(), 2u);
  EXPECT_DOUBLE_EQ(simulated[0].compute, 6);
  EXPECT_NEAR(simulated[0].transfer, 0.4, 1e-12);
  EXPECT_NEAR(simulated[0].waiting, 6.6, 1e-12);
  EXPECT_DOUBLE_EQ(simulated[1].compute, 5.9);
  EXPECT_NEAR(simulated[1].waiting, 6.7, 1e-12);
  EXPECT_DOUBLE_EQ(simulated[1].overhead, 0);
}

TEST(MeasuredTimeline, BreakdownAddsUpToTheStep) {
  MeasuredStep step = timings();
  step[1][2] = {2, 4.7, 8.5, 0};  // d1 starts B0 0.2 after F0 ended: host overhead
  const std::vector<TimeBreakdown> parts = measured_breakdown(tiny(), step);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_DOUBLE_EQ(parts[0].compute, 2 + 4);
  EXPECT_NEAR(parts[0].transfer, 0.5 + 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(parts[0].waiting, 3.4);
  EXPECT_DOUBLE_EQ(parts[0].overhead, 0);
  EXPECT_NEAR(parts[1].compute, 1.9 + 3.8, 1e-12);
  EXPECT_NEAR(parts[1].transfer, 0.1 + 0.1, 1e-12);
  EXPECT_NEAR(parts[1].waiting, 2.5 + (10 - 8.6), 1e-12);  // F0's wait, then idle until d0 ends at 10
  EXPECT_NEAR(parts[1].overhead, 0.2, 1e-12);
  for (const TimeBreakdown& p : parts) EXPECT_NEAR(p.compute + p.transfer + p.waiting + p.overhead, 10, 1e-12);
}

TEST(MeasuredTimeline, ForeignIndicesAreRejected) {
  auto bad = timings();
  bad[1].push_back({7, 0, 1, 0});
  EXPECT_THROW(measured_result(tiny(), bad), Error);
  EXPECT_THROW(measured_costs(tiny(), {{{}}}), Error);
  EXPECT_THROW(measured_costs(tiny(), {timings(), bad}), Error);
}

}  // namespace
}  // namespace flexpipe
