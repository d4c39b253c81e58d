// Tests of the simulator against hand timelines, bubble formulas, peak memory and link costs.
#include "flexpipe/sim/simulator.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

// "2F0", "1SEND_F3", "0OPT", "0UNSHARD" (declared custom kinds by name): enough cell syntax to
// write lowered schedules by hand.
Action cell(const Schedule& schedule, const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  size_t j = text.size();
  while (j > i && std::isdigit(static_cast<unsigned char>(text[j - 1]))) --j;
  const int stage = std::stoi(text.substr(0, i));
  const int microbatch = j < text.size() ? std::stoi(text.substr(j)) : -1;
  const std::string kind = text.substr(i, j - i);
  for (int k = 0; k < kNumActionKinds; ++k)
    if (kind_name(static_cast<ActionKind>(k)) == kind)
      return Action::make(static_cast<ActionKind>(k), stage, microbatch);
  for (size_t c = 0; c < schedule.custom_ops.size(); ++c)
    if (schedule.custom_ops[c].name == kind) return Action::custom_op(static_cast<uint16_t>(c), stage, microbatch);
  throw std::invalid_argument("bad cell " + text);
}

// One string of space-separated cells per device.
Schedule build(int microbatches, std::vector<int32_t> placement, const std::vector<std::string>& lists,
               std::vector<CustomOpKind> custom_ops = {}) {
  Schedule schedule = make_schedule("test", static_cast<int>(lists.size()), microbatches, std::move(placement));
  schedule.custom_ops = std::move(custom_ops);
  for (size_t d = 0; d < lists.size(); ++d) {
    std::istringstream cells(lists[d]);
    for (std::string text; cells >> text;) schedule.device_actions[d].push_back(cell(schedule, text));
  }
  return schedule;
}

// Compute-only 1F1B on p devices with m micro-batches (one stage per device).
Schedule one_f_one_b(int p, int m) {
  Schedule schedule = make_schedule("1f1b", p, m, loop_placement(p, p));
  for (int r = 0; r < p; ++r) {
    auto& list = schedule.device_actions[r];
    const int warmup = std::min(p - r - 1, m);
    int forward = 0, backward = 0;
    while (forward < warmup) list.push_back(Action::make(ActionKind::F, r, forward++));
    while (forward < m) {
      list.push_back(Action::make(ActionKind::F, r, forward++));
      list.push_back(Action::make(ActionKind::B, r, backward++));
    }
    while (backward < m) list.push_back(Action::make(ActionKind::B, r, backward++));
  }
  return schedule;
}

// The 2-device, 4-micro-batch 1F1B lowered by hand: each SEND right after its producer, each
// RECV right before its consumer.
Schedule two_device_1f1b() {
  return build(4, {0, 1},
               {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0F2 0SEND_F2 0RECV_B1 0B1 0F3 0SEND_F3 0RECV_B2 0B2 "
                "0RECV_B3 0B3",
                "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1 1RECV_F2 1F2 1B2 1SEND_B2 1RECV_F3 1F3 1B3 "
                "1SEND_B3"});
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

// The memory curve as "time:bytes" pairs, for compact exact comparisons.
std::string curve(const DeviceReport& report) {
  std::string out;
  for (const MemorySample& sample : report.memory)
    out += fmt::format("{}{}:{}", out.empty() ? "" : " ", sample.time, sample.bytes);
  return out;
}

void expect_interval(const Interval& interval, double start, double end) {
  EXPECT_DOUBLE_EQ(interval.start, start);
  EXPECT_DOUBLE_EQ(interval.end, end);
}

TEST(Simulator, TwoDevice1F1BMatchesTheHandTimeline) {
  const Schedule schedule = two_device_1f1b();
  const SimResult result = simulate(schedule, uniform_costs(2, 1, 1, 1), {});
  // (m + p - 1)(F + B) = 5 * 3.
  EXPECT_DOUBLE_EQ(result.makespan, 15);
  ASSERT_EQ(result.devices.size(), 2u);
  for (const DeviceReport& device : result.devices) {
    EXPECT_DOUBLE_EQ(device.busy, 12);
    EXPECT_DOUBLE_EQ(device.idle, 3);
  }
  EXPECT_DOUBLE_EQ(result.bubble_ratio, 0.2);  // (p - 1) / (m + p - 1)
  // Device 0: F0 [0,1] F1 [1,2], then B0 waits for device 1's B0, which ends at 4.
  expect_interval(result.timeline[0][0], 0, 1);
  expect_interval(result.timeline[0][1], 1, 1);  // SEND_F0 is a post: zero length
  expect_interval(result.timeline[0][5], 4, 6);
  expect_interval(result.timeline[0][15], 13, 15);
  expect_interval(result.timeline[1][1], 1, 2);
  expect_interval(result.timeline[1][5], 4, 5);  // 1F1: its input arrived at 2, the stream is free at 4
  // Device r of 1F1B holds p - r activations at its peak, first when its last warm-up forward starts.
  EXPECT_DOUBLE_EQ(result.devices[0].peak_memory, 2);
  EXPECT_DOUBLE_EQ(result.devices[0].peak_time, 1);
  EXPECT_DOUBLE_EQ(result.devices[1].peak_memory, 1);
  EXPECT_DOUBLE_EQ(result.devices[1].peak_time, 1);
  // A backward ending as the next forward starts changes nothing: no sample at 6 or 9.
  EXPECT_EQ(curve(result.devices[0]), "0:1 1:2 12:1 15:0");
  EXPECT_EQ(curve(result.devices[1]), "0:0 1:1 13:0");
  EXPECT_EQ(result.comm_transfers, 8);
  EXPECT_DOUBLE_EQ(result.comm_bytes, 0);
  ASSERT_EQ(result.transfers.size(), 8u);
  EXPECT_EQ(result.transfers[0].src, 0);
  EXPECT_EQ(result.transfers[0].dst, 1);
  EXPECT_EQ(result.transfers[0].position, 1);
  EXPECT_TRUE(result.fits);
  // The busiest device works 12; one micro-batch's path is only F + F + B + B = 6.
  EXPECT_DOUBLE_EQ(result.lower_bound, 12);
  EXPECT_DOUBLE_EQ(result.efficiency, 0.8);
  EXPECT_DOUBLE_EQ(lower_bound(schedule, uniform_costs(2, 1, 1, 1)), 12);
}

TEST(Simulator, Lowered1F1BFollowsTheBubbleFormulaAndPeakMemory) {
  const int p = 4, m = 8;
  const SimResult result = simulate(lower(one_f_one_b(p, m)), uniform_costs(p, 1, 1, 1), {});
  EXPECT_DOUBLE_EQ(result.makespan, (m + p - 1) * 3.0);
  EXPECT_DOUBLE_EQ(result.bubble_ratio, (p - 1.0) / (m + p - 1.0));
  for (int r = 0; r < p; ++r) {
    EXPECT_DOUBLE_EQ(result.devices[r].peak_memory, p - r) << "device " << r;
    EXPECT_DOUBLE_EQ(result.devices[r].peak_time, p - 1) << "device " << r;
  }
}

TEST(Simulator, LinkLatencyAddsToTheMakespan) {
  // One micro-batch crosses the link twice: F0 [0,1], arrives 1.5, 1F0 [1.5,2.5], 1B0 [2.5,4.5],
  // arrives 5, 0B0 [5,7].
  const Schedule single = build(1, {0, 1}, {"0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"});
  const CostTable costs = uniform_costs(2, 1, 1, 1, 0.5);
  const SimResult result = simulate(single, costs, {});
  EXPECT_DOUBLE_EQ(result.makespan, 7);
  EXPECT_DOUBLE_EQ(result.lower_bound, 7);  // the critical path, latency both ways included
  EXPECT_DOUBLE_EQ(result.efficiency, 1);
  expect_interval(result.transfers[1].time, 4.5, 5);
  // With four micro-batches each of the four hand-offs on the critical chain waits 0.5 more.
  EXPECT_DOUBLE_EQ(simulate(two_device_1f1b(), costs, {}).makespan, 15 + 4 * 0.5);
}

TEST(Simulator, TransferHostTimeOccupiesTheSenderAndTheReceiver) {
  // Send host time 0.25 + 2 / 8 = 0.5, receive 0.125 + 2 / 8 = 0.375, latency 0.5. Device 0: F0 [0,1],
  // SEND_F0 [1,1.5], the data travels [1.5,2], RECV_B0 [1.5,1.875]. Device 1: RECV_F0 [0,0.375],
  // F0 [2,3], B0 [3,5], SEND_B0 [5,5.5], travels [5.5,6]. Device 0: B0 [6,8]: 7 without host time,
  // plus the two sends on the chain; the receives fall in waits.
  const Schedule single = build(1, {0, 1}, {"0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"});
  CostTable costs = uniform_costs(2, 1, 1, 1);
  for (StageCosts& stage : costs.stages) stage.output_bytes = 2;
  costs.link = Link{0.5, kInfinity, 0.25, 0.125, 8};
  const SimResult result = simulate(single, costs, {});
  expect_interval(result.timeline[0][1], 1, 1.5);
  expect_interval(result.transfers[0].time, 1.5, 2);
  expect_interval(result.timeline[0][2], 1.5, 1.875);
  expect_interval(result.timeline[1][0], 0, 0.375);
  expect_interval(result.timeline[1][1], 2, 3);
  expect_interval(result.timeline[1][3], 5, 5.5);
  expect_interval(result.transfers[1].time, 5.5, 6);
  expect_interval(result.timeline[0][3], 6, 8);
  EXPECT_DOUBLE_EQ(result.makespan, 8);
  EXPECT_DOUBLE_EQ(result.devices[0].busy, 3);  // host time of transfers is not computation
  // A receive posted between computations delays the next one: device 1 runs F0, then posts RECV_F1.
  const Schedule two = build(2, {0, 1}, {"0F0 0SEND_F0 0F1 0SEND_F1", "1RECV_F0 1F0 1RECV_F1 1F1"});
  const SimResult second = simulate(two, costs, {});
  // Device 0: F0 [0,1], send [1,1.5], F1 [1.5,2.5], send [2.5,3]; arrivals 2 and 3.5. Device 1:
  // RECV_F0 [0,0.375], F0 [2,3], RECV_F1 [3,3.375], F1 [3.5,4.5].
  expect_interval(second.timeline[1][2], 3, 3.375);
  expect_interval(second.timeline[1][3], 3.5, 4.5);
  // Without latency and with a longer F on device 1 the data is there first: F0 [1.5,3.5], RECV_F1
  // [3.5,3.875], F1 [3.875,5.875]; the receive's host time is on the critical path.
  costs.link.latency = 0;
  costs.stages[1].forward = 2;
  EXPECT_DOUBLE_EQ(simulate(two, costs, {}).makespan, 5.875);
}

TEST(Simulator, TransfersOnOneLinkRunInPostingOrder) {
  CostTable costs = uniform_costs(2, 1, 1, 1, 100);  // the default link is never used
  costs.stages[0].forward = 0.5;
  costs.stages[0].output_bytes = 4;
  // Latency 1, bandwidth 2: each message holds the link for 4 / 2 = 2 and arrives 1 after that.
  costs.pairs = {LinkOverride{0, 1, Link{1, 2}}};
  const Schedule schedule = build(2, {0, 1}, {"0F0 0SEND_F0 0F1 0SEND_F1", "1RECV_F0 1F0 1RECV_F1 1F1"});
  const SimResult result = simulate(schedule, costs, {});
  ASSERT_EQ(result.transfers.size(), 2u);
  expect_interval(result.transfers[0].time, 0.5, 3.5);  // on the link 0.5-2.5, arrived at 3.5
  // Posted at 1, it waits for the link until 2.5, not for the first message's latency: it arrives at
  // 2.5 + 2 + 1 (a link that held each message for its latency too would deliver it at 6.5).
  expect_interval(result.transfers[1].time, 2.5, 5.5);
  EXPECT_DOUBLE_EQ(result.transfers[1].bytes, 4);
  expect_interval(result.timeline[1][1], 3.5, 4.5);
  expect_interval(result.timeline[1][3], 5.5, 6.5);
  EXPECT_DOUBLE_EQ(result.makespan, 6.5);
  EXPECT_DOUBLE_EQ(result.comm_bytes, 8);
  EXPECT_EQ(result.comm_transfers, 2);
}

TEST(Simulator, AMessageHandedOverBeforeItsReceiveWaitsForTheRendezvous) {
  // Latency 0.5, rendezvous 1. Device 0: F0 [0,1], hands SEND_F0 over at 1, F1 [1,2], SEND_F1 at 2.
  // Device 1 posts RECV_F0 at 0, before the message: it arrives at 1 + 0.5, F0 [1.5,2.5]. It posts
  // RECV_F1 at 2.5, after SEND_F1 was handed over: the message leaves on the receiver's notice and
  // arrives 1 after the RECV began, F1 [3.5,4.5] (eagerly it would have arrived at 2.5).
  const Schedule schedule = build(2, {0, 1}, {"0F0 0SEND_F0 0F1 0SEND_F1", "1RECV_F0 1F0 1RECV_F1 1F1"});
  CostTable costs = uniform_costs(2, 1, 1, 1);
  costs.link = Link{0.5, kInfinity, 0, 0, kInfinity, 1};
  const SimResult result = simulate(schedule, costs, {});
  expect_interval(result.timeline[1][1], 1.5, 2.5);
  expect_interval(result.timeline[1][3], 3.5, 4.5);
  EXPECT_DOUBLE_EQ(result.makespan, 4.5);
  costs.link.rendezvous = 0;
  EXPECT_DOUBLE_EQ(simulate(schedule, costs, {}).makespan, 3.5);
  // With 2 bytes at 4 per time unit, a message holds the link for 0.5: F0's arrives at 1 + 0.5 +
  // 0.5, F0 [2,3]; F1's, handed over at 2, after the RECV posted at 3: 3 + 1 + 0.5, F1 [4.5,5.5].
  costs.link = Link{0.5, 4, 0, 0, kInfinity, 1};
  for (StageCosts& stage : costs.stages) stage.output_bytes = 2;
  const SimResult timed = simulate(schedule, costs, {});
  expect_interval(timed.timeline[1][1], 2, 3);
  expect_interval(timed.timeline[1][3], 4.5, 5.5);
  // Gradients too. Stage 0: F 1, B 4; stage 1: F 1, B 2. Device 1: F0 [1.5,2.5], B0 [2.5,4.5],
  // SEND_B0 handed over at 4.5 after device 0 posted RECV_B0 (at 2): eager, at 5. RECV_F1 posted at
  // 4.5, after F1's message (2): F1 [5.5,6.5], B1 [6.5,8.5], handed over at 8.5. Device 0: B0 [5,9]
  // posts RECV_B1 at 9, after the gradient was handed over: it arrives at 10, B1 [10,14].
  const Schedule two_way = build(2, {0, 1},
                                 {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
                                  "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1"});
  costs = uniform_costs(2, 1, 1, 1);
  costs.stages[0].backward = 4;
  costs.stages[1].backward = 2;
  costs.link = Link{0.5, kInfinity, 0, 0, kInfinity, 1};
  const SimResult both = simulate(two_way, costs, {});
  expect_interval(both.timeline[1][3], 4.5, 4.5);
  expect_interval(both.timeline[0][5], 5, 9);
  expect_interval(both.timeline[1][5], 5.5, 6.5);
  expect_interval(both.timeline[0][7], 10, 14);
  EXPECT_DOUBLE_EQ(both.makespan, 14);
  // Without the rendezvous: F1 [4.5,5.5], B1 [5.5,7.5] -> 8; device 0's B1 [9,13].
  costs.link.rendezvous = 0;
  EXPECT_DOUBLE_EQ(simulate(two_way, costs, {}).makespan, 13);
}

TEST(Simulator, OffloadAndReloadMoveActivationsThroughTheHostLink) {
  CostTable costs = uniform_costs(1, 1, 1, 1);
  costs.stages[0].activation_bytes = 4;
  costs.host_link = Link{1, 2};  // 1 + 4 / 2 = 3 per move
  const Schedule schedule = build(2, {0}, {"0F0 0OFFLOAD0 0F1 0RELOAD0 0B1 0B0"});
  const SimResult result = simulate(schedule, costs, {});
  ASSERT_EQ(result.transfers.size(), 2u);
  EXPECT_EQ(result.transfers[0].src, 0);
  EXPECT_EQ(result.transfers[0].dst, -1);
  expect_interval(result.transfers[0].time, 1, 4);
  EXPECT_EQ(result.transfers[1].src, -1);
  EXPECT_EQ(result.transfers[1].dst, 0);
  expect_interval(result.transfers[1].time, 4, 7);  // posted at 2, waits for the offload to end
  EXPECT_DOUBLE_EQ(result.transfers[1].bytes, 4);
  expect_interval(result.timeline[0][5], 7, 9);  // B0 waits for its activations
  EXPECT_DOUBLE_EQ(result.makespan, 9);
  // At 4 the offload frees 4, B1 frees 4 and the reload takes 4 back.
  EXPECT_EQ(curve(result.devices[0]), "0:4 1:8 4:4 9:0");
  EXPECT_DOUBLE_EQ(result.devices[0].peak_memory, 8);
  EXPECT_DOUBLE_EQ(result.comm_bytes, 0);  // host moves are not SEND traffic
  EXPECT_EQ(error_of([&] { simulate(build(1, {0}, {"0F0 0OFFLOAD0 0B0"}), costs, {}); }),
            "deadlock: every unfinished device waits for an action that cannot run before it\n"
            "device 0 #2 0B0: waits for 0RELOAD0");
}

// A table without a host link ("host_link": null, what a search that may not offload writes) runs
// every schedule but one that offloads, which it names instead of taking forever.
TEST(Simulator, OffloadWithoutAHostLinkIsMalformed) {
  CostTable costs = uniform_costs(1, 1, 1, 1);
  costs.host_link = kNoHostLink;
  EXPECT_DOUBLE_EQ(simulate(build(2, {0}, {"0F0 0F1 0B1 0B0"}), costs, {}).makespan, 6);  // F 1, B 2
  const SimOutcome outcome = try_simulate(build(2, {0}, {"0F0 0OFFLOAD0 0F1 0RELOAD0 0B1 0B0"}), costs);
  EXPECT_EQ(outcome.status, SimStatus::Malformed);
  EXPECT_EQ(outcome.message,
            "device 0 offloads (OFFLOAD of stage 0), but the cost table has no host link (\"host_link\": null)");
}

TEST(Simulator, OffloadMovesOnlyItsBytesCappedByWhatIsHeld) {
  // Stage 0 on device 0 (F takes 4), stage 1 on device 1 holding 4 per micro-batch of which its
  // OFFLOAD moves 3 (the operators decided Offload); host link 0.5 + bytes / 2.
  CostTable costs = uniform_costs(2, 1, 1, 1);
  costs.stages[0].forward = 4;
  costs.stages[1].activation_bytes = 4;
  costs.stages[1].offload_bytes = 3;
  costs.host_link = Link{0.5, 2};
  const Schedule schedule = build(2, {0, 1},
                                  {"0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B1 0B1 0RECV_B0 0B0",
                                   "1RECV_F0 1F0 1OFFLOAD0 1RECV_F1 1F1 1B1 1SEND_B1 1RELOAD0 1B0 1SEND_B0"});
  auto host_moves = [](const SimResult& result) {
    std::vector<Transfer> moves;
    for (const Transfer& t : result.transfers)
      if (t.src == -1 || t.dst == -1) moves.push_back(t);
    return moves;
  };
  const SimResult partial = simulate(schedule, costs, {});
  // d0: F0 [0,4] F1 [4,8] B1 [11,13] B0 [15,17]; d1: F0 [4,5] F1 [8,9] B1 [9,11] B0 [13,15].
  const std::vector<Transfer> moved = host_moves(partial);
  ASSERT_EQ(moved.size(), 2u);
  EXPECT_EQ(moved[0].dst, -1);
  EXPECT_EQ(moved[1].src, -1);
  expect_interval(moved[0].time, 5, 7);  // 0.5 + 3 / 2
  EXPECT_DOUBLE_EQ(moved[0].bytes, 3);
  expect_interval(moved[1].time, 11, 13);  // posted after B1
  EXPECT_DOUBLE_EQ(moved[1].bytes, 3);
  expect_interval(partial.timeline[1][8], 13, 15);  // B0 waits for the reload
  EXPECT_DOUBLE_EQ(partial.makespan, 17);
  // F0 +4 at 4; the offload frees 3 at 7, one unit stays; F1 +4 at 8 is the peak, 5; at 11 B1 frees 4
  // as the reload brings 3 back.
  EXPECT_EQ(curve(partial.devices[1]), "0:0 4:4 7:1 8:5 11:4 15:0");
  EXPECT_DOUBLE_EQ(partial.devices[1].peak_memory, 5);
  EXPECT_DOUBLE_EQ(partial.devices[1].peak_time, 8);

  // The default moves everything held: 4 bytes take 2.5, the peak is 4.
  costs.stages[1].offload_bytes = kInfinity;
  const SimResult full = simulate(schedule, costs, {});
  expect_interval(host_moves(full)[0].time, 5, 7.5);
  EXPECT_DOUBLE_EQ(host_moves(full)[0].bytes, 4);
  EXPECT_EQ(curve(full.devices[1]), "0:0 4:4 7.5:0 8:4 15.5:0");
  EXPECT_DOUBLE_EQ(full.devices[1].peak_memory, 4);
  // More than is held moves what is held.
  costs.stages[1].offload_bytes = 10;
  const SimResult capped = simulate(schedule, costs, {});
  EXPECT_DOUBLE_EQ(host_moves(capped)[0].bytes, 4);
  EXPECT_EQ(curve(capped.devices[1]), curve(full.devices[1]));
}

TEST(Simulator, RecomputeHoldsTheCheckpointThenTheActivations) {
  CostTable costs = uniform_costs(1, 1, 1, 1);
  costs.stages[0].activation_bytes = 4;
  costs.stages[0].checkpoint_bytes = 1;
  const Schedule schedule = build(2, {0}, {"0F0 0F1 0R0 0B0 0R1 0B1"});
  const SimResult result = simulate(schedule, costs, {});
  // F0 [0,1] F1 [1,2] R0 [2,3] B0 [3,5] R1 [5,6] B1 [6,8].
  EXPECT_EQ(curve(result.devices[0]), "0:1 1:2 2:6 5:5 8:0");
  EXPECT_DOUBLE_EQ(result.devices[0].peak_memory, 6);
  EXPECT_DOUBLE_EQ(result.devices[0].peak_time, 2);
  EXPECT_DOUBLE_EQ(result.devices[0].busy, 8);
}

TEST(Simulator, AWholeBackwardRebuildsOnlyTheLargestSegment) {
  CostTable costs = uniform_costs(1, 1, 1, 1);
  costs.stages[0].activation_bytes = 4;
  costs.stages[0].checkpoint_bytes = 1;
  costs.stages[0].rebuilt_peak_bytes = 2;
  // Before B, R holds the largest segment (2): F0 [0,1] F1 [1,2] R0 [2,3] B0 [3,5] R1 [5,6] B1 [6,8].
  const SimResult whole = simulate(build(2, {0}, {"0F0 0F1 0R0 0B0 0R1 0B1"}), costs, {});
  EXPECT_EQ(curve(whole.devices[0]), "0:1 1:2 2:4 5:3 8:0");
  EXPECT_DOUBLE_EQ(whole.devices[0].peak_memory, 4);
  // Before a split backward, W still needs what the weighted operators saved: R rebuilds all 4.
  const SimResult split = simulate(build(2, {0}, {"0F0 0F1 0R0 0I0 0W0 0R1 0I1 0W1"}), costs, {});
  EXPECT_DOUBLE_EQ(split.devices[0].peak_memory, 6);
}

TEST(Simulator, CheckpointsHeldUntilWeightGradientWhereTheStageSaysSo) {
  CostTable costs = uniform_costs(1, 1, 1, 1);
  costs.stages[0].activation_bytes = 4;
  costs.stages[0].checkpoint_bytes = 1;
  // F0 [0,1] R0 [1,2] I0 [2,3] F1 [3,4] W0 [4,5] R1 [5,6] I1 [6,7] W1 [7,8].
  const Schedule schedule = build(2, {0}, {"0F0 0R0 0I0 0F1 0W0 0R1 0I1 0W1"});
  // By default I releases the checkpoint: F1's takes its place at 3 while W0 still holds the 4 R0
  // rebuilt, and R1 rebuilds at 5 what W0 released.
  EXPECT_EQ(curve(simulate(schedule, costs, {}).devices[0]), "0:1 1:5 7:4 8:0");
  // A captured model's runtime keeps the checkpoint in the graphs it retains for W: released with them,
  // so F1 comes on top of it (6).
  costs.stages[0].checkpoint_until_weight = true;
  const SimResult held = simulate(schedule, costs, {});
  EXPECT_EQ(curve(held.devices[0]), "0:1 1:5 3:6 5:5 8:0");
  EXPECT_DOUBLE_EQ(held.devices[0].peak_memory, 6);
}

TEST(Simulator, WorkspaceIsHeldOnlyWhileTheStageComputes) {
  // Stage 0 saves 4 and needs 3 more while it computes.
  auto costs_for = [](int stages) {
    CostTable costs = uniform_costs(stages, 1, 1, 1);
    costs.stages[0].activation_bytes = 4;
    costs.stages[0].workspace_bytes = 3;
    return costs;
  };
  // F0 [0,1] F1 [1,2] B0 [2,4] B1 [4,6].
  const SimResult result = simulate(build(2, {0}, {"0F0 0F1 0B0 0B1"}), costs_for(1), {});
  // 0: 4 + 3; 1: F0's workspace goes, F1's 4 + 3 come; 4: B0's 4 + 3 go, B1's 3 comes.
  EXPECT_EQ(curve(result.devices[0]), "0:7 1:11 4:7 6:0");
  EXPECT_DOUBLE_EQ(result.devices[0].peak_memory, 11);
  // Without a computation running it is not held. Device 0: F0 [0,1], idle while stage 1 works
  // [1,4], B0 [4,6].
  const Schedule two = build(2, {0, 1}, {"0F0 0B0", "1F0 1B0"});
  EXPECT_EQ(curve(simulate(lower(two), costs_for(2), {}).devices[0]), "0:7 1:4 4:7 6:0");
}

TEST(Simulator, InputGradientFreesItsShareAndWeightGradientTheRest) {
  CostTable costs = uniform_costs(1, 1, 1, 1);
  costs.stages[0].activation_bytes = 4;
  costs.stages[0].freed_by_input = 3;
  const SimResult result = simulate(build(1, {0}, {"0F0 0I0 0W0"}), costs, {});
  EXPECT_EQ(curve(result.devices[0]), "0:4 2:1 3:0");
  EXPECT_DOUBLE_EQ(result.makespan, 3);
}

TEST(Simulator, OverlapTakesItsRatioOfForwardPlusBackward) {
  CostTable costs = uniform_costs(2, 1, 1, 1);
  costs.overlap_ratio = 0.5;
  // Both stages on device 0: the turn needs no transfer.
  Schedule schedule = build(2, {0, 0}, {"0F0 1F0"});
  auto& list = schedule.device_actions[0];
  list.push_back(Action::overlap(0, 1, 1, 0));
  for (const char* text : {"1F1", "0B0", "1B1", "0B1"}) list.push_back(cell(schedule, text));
  const SimResult result = simulate(schedule, costs, {});
  expect_interval(result.timeline[0][2], 2, 3.5);  // 0.5 * (F + B) = 1.5
  expect_interval(result.timeline[0][3], 3.5, 4.5);
  EXPECT_DOUBLE_EQ(result.makespan, 10.5);
  // The unit allocates 0F1 at 2 and frees 1B0 at 3.5, as 1F1 allocates.
  EXPECT_EQ(curve(result.devices[0]), "0:1 1:2 2:3 6.5:2 8.5:1 10.5:0");
}

TEST(Simulator, StaticMemoryAndCapacityDecideWhatFits) {
  CostTable costs = uniform_costs(2, 1, 1, 1);
  costs.stages[0].parameter_bytes = 10;
  costs.stages[0].gradient_bytes = 10;
  costs.stages[0].optimizer_bytes = 20;
  costs.stages[1].parameter_bytes = 5;
  costs.stages[1].gradient_bytes = 5;
  costs.stages[1].optimizer_bytes = 5;
  costs.memory_capacity = {41, 16};
  const SimResult result = simulate(two_device_1f1b(), costs, {});
  EXPECT_DOUBLE_EQ(result.devices[0].static_memory, 40);
  EXPECT_DOUBLE_EQ(result.devices[1].static_memory, 15);
  EXPECT_DOUBLE_EQ(result.devices[0].peak_memory, 42);
  EXPECT_DOUBLE_EQ(result.devices[1].peak_memory, 16);
  EXPECT_EQ(curve(result.devices[1]), "0:15 1:16 13:15");
  EXPECT_FALSE(result.devices[0].fits);
  EXPECT_TRUE(result.devices[1].fits);
  EXPECT_DOUBLE_EQ(result.devices[1].capacity, 16);
  EXPECT_FALSE(result.fits);
}

TEST(Simulator, StagesOfASecondPipelineUseTheirChunksCosts) {
  CostTable costs = uniform_costs(2, 1, 1, 1);
  costs.stages[1].forward = 3;
  Schedule schedule = build(2, bidirectional_placement(2), {"0F0 0SEND_F0 3RECV_F1 3F1", "2F1 2SEND_F1 1RECV_F0 1F0"});
  schedule.num_pipelines = 2;
  schedule.stages_per_pipeline = 2;
  schedule.microbatch_pipeline = {0, 1};
  const SimResult result = simulate(schedule, costs, {});
  expect_interval(result.timeline[1][0], 0, 1);  // stage 2 is chunk 0
  expect_interval(result.timeline[0][3], 1, 4);  // stage 3 is chunk 1
  EXPECT_DOUBLE_EQ(result.makespan, 4);
}

TEST(Simulator, RecordingOffKeepsTheReport) {
  const Schedule schedule = lower(one_f_one_b(4, 8));
  const CostTable costs = uniform_costs(4, 1, 2, 1, 0.25);
  const SimResult full = simulate(schedule, costs, {});
  const SimResult bare = simulate(schedule, costs, SimOptions{false, false});
  EXPECT_EQ(bare.makespan, full.makespan);
  EXPECT_EQ(bare.bubble_ratio, full.bubble_ratio);
  EXPECT_EQ(bare.lower_bound, full.lower_bound);
  EXPECT_EQ(bare.comm_transfers, full.comm_transfers);
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(bare.devices[d].peak_memory, full.devices[d].peak_memory);
    EXPECT_EQ(bare.devices[d].peak_time, full.devices[d].peak_time);
    EXPECT_TRUE(bare.devices[d].memory.empty());
  }
  EXPECT_TRUE(bare.timeline.empty());
  EXPECT_TRUE(bare.transfers.empty());
}

TEST(Simulator, DeadlockThrowsNamingEveryBlockedDevice) {
  const Schedule crossed = build(1, {0, 1}, {"0RECV_B0 0B0 0F0 0SEND_F0", "1RECV_F0 1F0 1B0 1SEND_B0"});
  EXPECT_EQ(error_of([&] { simulate(crossed, uniform_costs(2, 1, 1, 1), {}); }),
            "deadlock: every unfinished device waits for an action that cannot run before it\n"
            "device 0 #1 0B0: waits for 1SEND_B0\n"
            "device 1 #1 1F0: waits for 0SEND_F0");
  EXPECT_EQ(error_of([&] { simulate(build(1, {0}, {"0F0 0W0 0I0"}), uniform_costs(1, 1, 1, 1), {}); }),
            "deadlock: every unfinished device waits for an action that cannot run before it\n"
            "device 0 #1 0W0: waits for 0I0");
}

TEST(Simulator, CrossDeviceInputWithoutReceiveAsksForLowering) {
  const Schedule compute_only = one_f_one_b(2, 1);
  EXPECT_EQ(error_of([&] { simulate(compute_only, uniform_costs(2, 1, 1, 1), {}); }),
            "device 0 #1 0B0: needs 1B0 from device 1 but no RECV_B precedes it: simulate a lowered schedule");
  const Schedule receive_after = build(1, {0, 1}, {"0F0 0SEND_F0", "1F0 1RECV_F0"});
  EXPECT_EQ(error_of([&] { simulate(receive_after, uniform_costs(2, 1, 1, 1), {}); }),
            "device 1 #0 1F0: needs 0F0 from device 0 but no RECV_F precedes it: simulate a lowered schedule");
  const Schedule no_gradient = build(1, {0, 1}, {"0F0 0SEND_F0 0I0 0W0", "1RECV_F0 1F0 1I0 1SEND_B0 1W0"});
  EXPECT_EQ(error_of([&] { simulate(no_gradient, uniform_costs(2, 1, 1, 1), {}); }),
            "device 0 #2 0I0: needs 1I0 from device 1 but no RECV_B precedes it: simulate a lowered schedule");
}

TEST(Simulator, MalformedActionsThrowInsteadOfReadingOutOfRange) {
  const CostTable costs = uniform_costs(2, 1, 1, 1);
  EXPECT_EQ(error_of([&] {
              simulate(build(1, {0, 1}, {"0F0 1F0", ""}), costs, {});
            }),
            "device 0 #1 1F0: stage 1 is placed on device 1");
  EXPECT_EQ(error_of([&] {
              simulate(build(1, {0, 1}, {"0F3", ""}), costs, {});
            }),
            "device 0 #0 0F3: micro-batch 3 does not exist (the schedule has 1)");
  EXPECT_EQ(error_of([&] {
              simulate(build(1, {0, 1}, {"", "1SEND_F0"}), costs, {});
            }),
            "device 1 #0 1SEND_F0: stage 1 is the last stage of its pipeline: there is no peer");
  EXPECT_EQ(error_of([&] {
              simulate(build(1, {0, 0}, {"0F0 0SEND_F0"}), costs, {});
            }),
            "device 0 #1 0SEND_F0: stages 0 and 1 are both on device 0: nothing crosses a link");
  EXPECT_EQ(error_of([&] {
              simulate(build(1, {0, 1}, {"0F0", "1F0"}), uniform_costs(1, 1, 1, 1), {});
            }),
            "cost table: 1 stage entry for a schedule with 2 stages per pipeline (one entry is not repeated for "
            "every stage: write it as \"all_stages\" with \"num_stages\": 2)");
}

TEST(Simulator, TrySimulateReturnsTheStatusAndTheMessageSimulateWouldThrow) {
  const CostTable costs = uniform_costs(2, 1, 1, 1);
  const Schedule crossed = build(1, {0, 1}, {"0RECV_B0 0B0 0F0 0SEND_F0", "1RECV_F0 1F0 1B0 1SEND_B0"});
  const std::vector<std::pair<Schedule, SimStatus>> failing = {
      {crossed, SimStatus::Deadlocked},
      {one_f_one_b(2, 1), SimStatus::NotLowered},
      {build(1, {0, 1}, {"0F0 1F0", ""}), SimStatus::Malformed},
  };
  for (const auto& [failing_schedule, status] : failing) {
    const Schedule& schedule = failing_schedule;  // clang 14 cannot capture a structured binding
    const SimOutcome outcome = try_simulate(schedule, costs);
    EXPECT_EQ(outcome.status, status);
    EXPECT_FALSE(outcome.ran());
    EXPECT_EQ(outcome.message, error_of([&] { simulate(schedule, costs); }));
    EXPECT_TRUE(outcome.result.devices.empty());
  }
  EXPECT_EQ(try_simulate(lower(one_f_one_b(2, 2)), uniform_costs(1, 1, 1, 1)).status, SimStatus::Malformed);

  const Schedule runs = lower(one_f_one_b(2, 2));
  const SimOutcome fits = try_simulate(runs, costs);
  EXPECT_EQ(fits.status, SimStatus::Ok);
  EXPECT_TRUE(fits.message.empty());
  EXPECT_EQ(fits.result.makespan, simulate(runs, costs).makespan);
  CostTable small = costs;
  small.memory_capacity = {1};
  const SimOutcome over = try_simulate(runs, small);
  EXPECT_EQ(over.status, SimStatus::OverMemory);
  EXPECT_TRUE(over.ran());
  EXPECT_FALSE(over.result.fits);
  EXPECT_EQ(over.result.makespan, fits.result.makespan);
}

TEST(LowerBound, SplitBackwardPathEndsWithTheFirstStagesWeightGradient) {
  // F0 + F1 + I1 + I0 + W0 + two latencies of 0.5 = 6; the simulation reaches it.
  const Schedule schedule = build(1, {0, 1}, {"0F0 0SEND_F0 0RECV_B0 0I0 0W0", "1RECV_F0 1F0 1I0 1SEND_B0 1W0"});
  const CostTable costs = uniform_costs(2, 1, 1, 1, 0.5);
  EXPECT_DOUBLE_EQ(lower_bound(schedule, costs), 6);
  EXPECT_DOUBLE_EQ(lower_bound(strip_communication(schedule), costs), 6);
  const SimResult result = simulate(schedule, costs, {});
  EXPECT_DOUBLE_EQ(result.makespan, 6);
  EXPECT_DOUBLE_EQ(result.efficiency, 1);
  // Transfers carry bytes over bandwidth too: 0.5 + 6 / 3 = 2.5 each way.
  CostTable heavy = costs;
  heavy.stages[0].output_bytes = 6;
  heavy.link.bandwidth = 3;
  EXPECT_DOUBLE_EQ(lower_bound(schedule, heavy), 5 + 2 * 2.5);
  EXPECT_DOUBLE_EQ(simulate(schedule, heavy, {}).makespan, 10);
}

TEST(Simulator, CustomKindsRunWithTheirDeclaredDependencies) {
  CustomOpKind unshard;  // gathers parameters off the compute stream before any forward
  unshard.name = "UNSHARD";
  unshard.before = {CustomDependency{ActionKind::F, 0, true}};
  unshard.duration = 2;
  unshard.memory = 5;
  unshard.communicates = true;
  unshard.per_microbatch = false;
  CustomOpKind reduce;  // after every backward, releases the gathered parameters when it ends
  reduce.name = "REDUCE_GRAD";
  reduce.after = {CustomDependency{ActionKind::B, 0, true}};
  reduce.duration = 1;
  reduce.memory = -5;
  reduce.per_microbatch = false;
  const CostTable costs = uniform_costs(1, 1, 1, 1);
  const Schedule schedule = build(2, {0}, {"0UNSHARD 0F0 0F1 0B0 0B1 0REDUCE_GRAD"}, {unshard, reduce});
  const SimResult result = simulate(schedule, costs, {});
  ASSERT_EQ(result.transfers.size(), 1u);
  EXPECT_EQ(result.transfers[0].src, 0);
  EXPECT_EQ(result.transfers[0].dst, 0);
  expect_interval(result.transfers[0].time, 0, 2);
  expect_interval(result.timeline[0][1], 2, 3);  // F0 waits for UNSHARD
  expect_interval(result.timeline[0][5], 8, 9);
  EXPECT_DOUBLE_EQ(result.devices[0].busy, 7);  // the communicating UNSHARD is not compute
  EXPECT_EQ(curve(result.devices[0]), "0:5 2:6 3:7 6:6 8:5 9:0");
  const Schedule early = build(2, {0}, {"0UNSHARD 0F0 0F1 0B0 0REDUCE_GRAD 0B1"}, {unshard, reduce});
  EXPECT_EQ(error_of([&] { simulate(early, costs, {}); }),
            "deadlock: every unfinished device waits for an action that cannot run before it\n"
            "device 0 #4 0REDUCE_GRAD: waits for 0B1");
}

}  // namespace
}  // namespace flexpipe
