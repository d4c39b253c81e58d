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

// As timings(), with clocks that agree: d0's B0 waits until 9, 0.4 after d1's SEND_B0 ended.
MeasuredStep consistent_timings() {
  MeasuredStep step = timings();
  step[0][3] = {3, 2.6, 13, 6.4};
  return step;
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
  // The made-up first step's clocks disagree (d0 has the gradient at 6, before d1 sends it at 8.5):
  // put on one clock, both of its messages arrive 1.45 and 1.05 before they were handed over; the
  // second step's arrive 0.05 and 0.45 after. The mean is below nothing: no latency.
  EXPECT_DOUBLE_EQ(c.link.latency, 0);
  EXPECT_DOUBLE_EQ(c.link.rendezvous, 0);  // every receive was posted before its message
  EXPECT_DOUBLE_EQ(c.link.bandwidth, kInfinity);
  // With consistent clocks: B0 on d0 waits until 9. The least delays from a SEND's start, 0.6 one
  // way and 0.5 the other, put d1's clock 0.05 ahead of d0's: F0's input arrives 0.05 after its SEND
  // ended, B0's gradient 0.45 after: latency 0.25.
  const MeasuredStep consistent = consistent_timings();
  const CostTable d = measured_costs(s, {consistent});
  EXPECT_NEAR(d.link.latency, (0.05 + 0.45) / 2, 1e-12);
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

TEST(MeasuredTimeline, MessagesAreSeenFromBothEnds) {
  const std::vector<MeasuredMessage> found = measured_messages(tiny(), consistent_timings());
  ASSERT_EQ(found.size(), 2u);
  const MeasuredMessage& forward = found[0].gradient ? found[1] : found[0];
  const MeasuredMessage& gradient = found[0].gradient ? found[0] : found[1];
  EXPECT_EQ(forward.sender, 0);
  EXPECT_EQ(forward.receiver, 1);
  EXPECT_DOUBLE_EQ(forward.sent, 2);
  EXPECT_DOUBLE_EQ(forward.handed_over, 2.5);
  EXPECT_DOUBLE_EQ(forward.posted, 0);
  EXPECT_DOUBLE_EQ(forward.arrived, 2.6);
  EXPECT_DOUBLE_EQ(forward.waited, 2.5);
  EXPECT_EQ(gradient.sender, 1);
  EXPECT_EQ(gradient.receiver, 0);
  EXPECT_DOUBLE_EQ(gradient.sent, 8.5);
  EXPECT_DOUBLE_EQ(gradient.posted, 2.5);
  EXPECT_DOUBLE_EQ(gradient.arrived, 9);
  // A message whose consumer was not recorded is left out.
  MeasuredStep partial = consistent_timings();
  partial[0].pop_back();
  ASSERT_EQ(measured_messages(tiny(), partial).size(), 1u);
  EXPECT_FALSE(measured_messages(tiny(), partial)[0].gradient);
}

TEST(MeasuredTimeline, ClockOffsetsPutEveryRankOnDeviceZerosClock) {
  // Least delays 0.6 (d0 to d1) and 0.5 (back): d1's clock reads 0.05 ahead of d0's.
  std::vector<double> offsets = clock_offsets(tiny(), consistent_timings());
  ASSERT_EQ(offsets.size(), 2u);
  EXPECT_DOUBLE_EQ(offsets[0], 0);
  EXPECT_NEAR(offsets[1], -0.05, 1e-12);
  // d1 leaving the step's barrier 1 earlier reads 1 more everywhere: 1.6 and -0.5, offset -1.05,
  // and the link read off the step does not change.
  MeasuredStep early = consistent_timings();
  for (MeasuredAction& m : early[1]) m.start += 1, m.end += 1;
  offsets = clock_offsets(tiny(), early);
  EXPECT_NEAR(offsets[1], -1.05, 1e-12);
  EXPECT_NEAR(measured_costs(tiny(), {early}).link.latency, 0.25, 1e-12);
}

TEST(MeasuredTimeline, AReceivePostedAfterTheHandOverMeasuresTheRendezvous) {
  // d0 posts RECV_B0 at 9.2, and B0 waits 0.5 for the gradient d1 sent at [8.5,8.6]. Least delays
  // 0.6 and 1.3 put d1's clock 0.35 behind: F0's input arrived 0.45 after its SEND ended (eager),
  // and the gradient, handed over at 8.95 on d0's clock, before the receive: rendezvous 9.8 - 9.2.
  MeasuredStep step = timings();
  step[0][2] = {2, 9.2, 9.3, 0};
  step[0][3] = {3, 9.3, 13.8, 0.5};
  const CostTable c = measured_costs(tiny(), {step});
  EXPECT_NEAR(c.link.latency, 0.45, 1e-12);
  EXPECT_NEAR(c.link.rendezvous, 0.6, 1e-12);
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
