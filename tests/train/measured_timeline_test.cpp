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

std::vector<std::vector<MeasuredAction>> timings() {
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

TEST(MeasuredTimeline, CostsAreMeanComputeTimesPerChunk) {
  const Schedule s = tiny();
  const CostTable c = measured_costs(s, timings());
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(c.stages[0].forward, 2);
  EXPECT_DOUBLE_EQ(c.stages[0].backward, 4);
  EXPECT_DOUBLE_EQ(c.stages[1].forward, 1.9);
  EXPECT_DOUBLE_EQ(c.stages[1].backward_input, 2);  // never split: half of B each
  EXPECT_DOUBLE_EQ(c.stages[1].recompute, 1.9);
  // With free links the simulator chains them: F0 2, F1 1.9, B1 4, B0 4.
  EXPECT_DOUBLE_EQ(simulate(s, c).makespan, 11.9);
}

TEST(MeasuredTimeline, ForeignIndicesAreRejected) {
  auto bad = timings();
  bad[1].push_back({7, 0, 1, 0});
  EXPECT_THROW(measured_result(tiny(), bad), Error);
  EXPECT_THROW(measured_costs(tiny(), {{}}), Error);
}

}  // namespace
}  // namespace flexpipe
