// The 1F1B family of built-in generators: exact orders on hand-computed cases, validity over a
// sweep of (p, m, v), the documented requirements, and the bubble and memory formulas of
// docs/schedules.md checked against the simulator with uniform costs and free communication.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"
#include "schedule_test_helpers.h"

namespace flexpipe {
namespace {

using test::build;
using test::build_error;
using test::gaps_inside_window;
using test::kTolerance;
using test::row;
using test::run;

const std::vector<std::string> kFamily = {"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2"};

struct Case {
  std::string name;
  int p, m, v;
};

// The sweep of the task: p in {2,3,4,8}, m in {p,2p,4p} where allowed, v in {1,2,3} where it applies.
std::vector<Case> sweep(const std::string& name) {
  const BuiltinSchedule* builtin = find_builtin(name);
  std::vector<Case> cases;
  for (int p : {2, 3, 4, 8})
    for (int m : {p, 2 * p, 4 * p})
      for (int v : {1, 2, 3}) {
        if (!builtin->chunks_adjustable && v != builtin->default_chunks) continue;
        if (!builtin->check({p, m, v}).empty()) continue;
        cases.push_back({name, p, m, v});
      }
  return cases;
}

// ---------------------------------------------------------------------------------------------
// Registry

TEST(OneFOneBFamily, RegistersEveryScheduleWithItsChunkPolicy) {
  struct Expected {
    std::string name;
    int default_chunks;
    bool adjustable;
  };
  for (const Expected& e :
       {Expected{"gpipe", 1, false}, Expected{"1f1b", 1, false}, Expected{"interleaved-1f1b", 2, true},
        Expected{"looped-bfs", 2, true}, Expected{"zb-h1", 1, false}, Expected{"zb-h2", 1, false}}) {
    const BuiltinSchedule* builtin = find_builtin(e.name);
    ASSERT_NE(builtin, nullptr) << e.name;
    EXPECT_EQ(builtin->name, e.name);
    EXPECT_EQ(builtin->default_chunks, e.default_chunks) << e.name;
    EXPECT_EQ(builtin->chunks_adjustable, e.adjustable) << e.name;
    EXPECT_FALSE(builtin->description.empty()) << e.name;
  }
  EXPECT_EQ(find_builtin("ZB_H1"), find_builtin("zb-h1"));
  EXPECT_EQ(find_builtin("Interleaved 1F1B"), find_builtin("interleaved-1f1b"));
  EXPECT_EQ(find_builtin("LoopedBFS"), find_builtin("looped-bfs"));
}

// ---------------------------------------------------------------------------------------------
// Exact orders, computed by hand from each schedule's rule

TEST(OneFOneBFamily, GPipeRunsAllForwardsThenAllBackwards) {
  Schedule s = build("gpipe", 2, 3);
  EXPECT_EQ(row(s, 0), "0F0 0F1 0F2 0B0 0B1 0B2");
  EXPECT_EQ(row(s, 1), "1F0 1F1 1F2 1B0 1B1 1B2");
}

TEST(OneFOneBFamily, OneFOneBWarmsUpWithPMinusRMinusOneForwards) {
  Schedule s = build("1f1b", 3, 4);
  EXPECT_EQ(row(s, 0), "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3");
  EXPECT_EQ(row(s, 1), "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3");
  EXPECT_EQ(row(s, 2), "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3");
}

TEST(OneFOneBFamily, InterleavedFollowsMegatronScheduleTable) {
  // p=2, v=2: device 0 holds stages 0 and 2, device 1 stages 1 and 3. Table in groups of 2:
  // (c0,0) (c0,1) (c1,0) (c1,1) (c0,2) (c0,3) (c1,2) (c1,3); warm-up 4 on device 0, 2 on device 1.
  Schedule s = build("interleaved-1f1b", 2, 4, 2);
  EXPECT_EQ(s.stage_device, loop_placement(2, 4));
  EXPECT_EQ(row(s, 0), "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3");
  EXPECT_EQ(row(s, 1), "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3");
}

TEST(OneFOneBFamily, LoopedBfsSweepsChunksForwardThenBackwardInReverse) {
  Schedule s = build("looped-bfs", 2, 2, 2);
  EXPECT_EQ(s.stage_device, loop_placement(2, 4));
  EXPECT_EQ(row(s, 0), "0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0");
  EXPECT_EQ(row(s, 1), "1F0 1F1 3F0 3F1 3B1 3B0 1B1 1B0");
}

TEST(OneFOneBFamily, ZbH1HoldsBackRWeightGradientsOnDeviceR) {
  Schedule s = build("zb-h1", 3, 4);
  EXPECT_EQ(row(s, 0), "0F0 0F1 0F2 0I0 0W0 0F3 0I1 0W1 0I2 0W2 0I3 0W3");
  EXPECT_EQ(row(s, 1), "1F0 1F1 1I0 1F2 1I1 1W0 1F3 1I2 1W1 1I3 1W2 1W3");
  EXPECT_EQ(row(s, 2), "2F0 2I0 2F1 2I1 2F2 2I2 2W0 2F3 2I3 2W1 2W2 2W3");
}

TEST(OneFOneBFamily, ZbH2WarmsUpWith2PMinus2RMinus1ForwardsAndDefersTailWeights) {
  // p=2, m=4: the steady part is micro-batch 0 only (m-2p+1 = 1); afterwards device 1 runs its
  // two remaining forwards in place of W's and ends with 2r+1 = 3 W's.
  Schedule s = build("zb-h2", 2, 4);
  EXPECT_EQ(row(s, 0), "0F0 0F1 0F2 0I0 0W0 0F3 0I1 0W1 0I2 0W2 0I3 0W3");
  EXPECT_EQ(row(s, 1), "1F0 1I0 1W0 1F1 1I1 1F2 1I2 1F3 1I3 1W1 1W2 1W3");
  // m = 2p-1: no steady part at all.
  Schedule t = build("zb-h2", 3, 5);
  EXPECT_EQ(row(t, 0), "0F0 0F1 0F2 0F3 0F4 0I0 0W0 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4");
  EXPECT_EQ(row(t, 1), "1F0 1F1 1F2 1I0 1F3 1I1 1F4 1I2 1W0 1I3 1W1 1I4 1W2 1W3 1W4");
  EXPECT_EQ(row(t, 2), "2F0 2I0 2F1 2I1 2F2 2I2 2F3 2I3 2F4 2I4 2W0 2W1 2W2 2W3 2W4");
}

// ---------------------------------------------------------------------------------------------
// Validity and shape over the sweep

TEST(OneFOneBFamily, EveryGeneratedScheduleIsValidComputeOnlyAndDeterministic) {
  for (const std::string& name : kFamily) {
    const bool split = name == "zb-h1" || name == "zb-h2";
    for (const Case& c : sweep(name)) {
      SCOPED_TRACE(testing::Message() << c.name << " p=" << c.p << " m=" << c.m << " v=" << c.v);
      Schedule s = build(c.name, c.p, c.m, c.v);
      EXPECT_EQ(s.name, c.name);
      EXPECT_EQ(s.num_devices, c.p);
      EXPECT_EQ(s.num_microbatches, c.m);
      EXPECT_EQ(s.num_pipelines, 1);
      EXPECT_EQ(s.stage_device, loop_placement(c.p, c.p * c.v));
      EXPECT_FALSE(s.has_communication());
      EXPECT_EQ(s.num_actions(), int64_t{c.p} * c.v * c.m * (split ? 3 : 2));
      for (const auto& actions : s.device_actions)
        for (const Action& a : actions) {
          const bool allowed = a.kind == ActionKind::F ||
                               (split ? a.kind == ActionKind::I || a.kind == ActionKind::W : a.kind == ActionKind::B);
          EXPECT_TRUE(allowed) << s.action_name(a);
        }
      std::vector<Diagnostic> diagnostics = validate(s);
      for (const Diagnostic& d : diagnostics) ADD_FAILURE() << d.to_string();
      EXPECT_EQ(build(c.name, c.p, c.m, c.v), s);
    }
  }
}

TEST(OneFOneBFamily, SmallAndOddParametersStayValid) {
  // Single device, fewer micro-batches than devices where allowed, m not a multiple of p.
  for (const std::string& name : kFamily)
    for (int p : {1, 2, 5})
      for (int m : {1, 2, 3, 7})
        for (int v : {1, 2, 3}) {
          const BuiltinSchedule* builtin = find_builtin(name);
          if (!builtin->chunks_adjustable && v != builtin->default_chunks) continue;
          if (!builtin->check({p, m, v}).empty()) continue;
          SCOPED_TRACE(testing::Message() << name << " p=" << p << " m=" << m << " v=" << v);
          std::vector<Diagnostic> diagnostics = validate(build(name, p, m, v));
          for (const Diagnostic& d : diagnostics) ADD_FAILURE() << d.to_string();
        }
}

TEST(OneFOneBFamily, DefaultsAreTwoMicroBatchesPerDeviceAndTheDefaultChunks) {
  Schedule s = build("interleaved-1f1b", 3, 0, 0);
  EXPECT_EQ(s.num_microbatches, 6);
  EXPECT_EQ(s.num_stages(), 6);
  EXPECT_EQ(build("looped-bfs", 2, 0, 3).num_stages(), 6);
  EXPECT_EQ(build("zb-h2", 4, 0).num_stages(), 4);
}

// ---------------------------------------------------------------------------------------------
// Requirements

// With m < p the warm-up is bounded by m (Megatron-LM and the Zero Bubble fork allow it; PyTorch's
// Schedule1F1B refuses it): device r runs min(m, p-r-1) warm-up forwards, so the devices r < p-m run
// GPipe's order and the last m devices 1F1B's.
TEST(OneFOneBFamily, OneFOneBWithFewerMicroBatchesThanDevicesBoundsTheWarmupByM) {
  EXPECT_EQ(find_builtin("1f1b")->check({4, 2, 1}), "");
  EXPECT_EQ(build_error("1f1b", 4, 1), "");
  Schedule s = build("1f1b", 4, 2);
  EXPECT_EQ(row(s, 0), "0F0 0F1 0B0 0B1");
  EXPECT_EQ(row(s, 1), "1F0 1F1 1B0 1B1");
  EXPECT_EQ(row(s, 2), "2F0 2F1 2B0 2B1");
  EXPECT_EQ(row(s, 3), "3F0 3B0 3F1 3B1");
}

TEST(OneFOneBFamily, InterleavedNeedsMAMultipleOfP) {
  EXPECT_EQ(find_builtin("interleaved-1f1b")->check({4, 6, 2}), "needs m to be a multiple of p");
  EXPECT_EQ(find_builtin("interleaved-1f1b")->check({4, 3, 2}), "needs m to be a multiple of p");
  EXPECT_EQ(find_builtin("interleaved-1f1b")->check({4, 8, 3}), "");
  EXPECT_EQ(build_error("interleaved-1f1b", 4, 6, 2),
            "interleaved-1f1b with p=4, m=6, v=2: needs m to be a multiple of p");
}

TEST(OneFOneBFamily, OtherSchedulesTakeAnyMicroBatchCount) {
  for (const char* name : {"gpipe", "1f1b", "looped-bfs", "zb-h1", "zb-h2"})
    for (int m : {1, 3, 5}) EXPECT_EQ(build_error(name, 4, m), "") << name << " m=" << m;
}

TEST(OneFOneBFamily, FixedChunkSchedulesRefuseOtherChunkCounts) {
  EXPECT_EQ(build_error("gpipe", 4, 8, 2), "gpipe: has exactly 1 chunk per device (got v=2)");
  EXPECT_EQ(build_error("zb-h2", 4, 8, 3), "zb-h2: has exactly 1 chunk per device (got v=3)");
}

// ---------------------------------------------------------------------------------------------
// Formulas, from the simulator with uniform costs and free communication

struct Costs {
  double f, i, w;
};

double peak(const SimResult& result, int device) { return result.devices[device].peak_memory; }

SimResult run(const Schedule& schedule, Costs c) {
  return run(schedule, uniform_costs(schedule.stages_per_pipeline, c.f, c.i, c.w));
}

TEST(OneFOneBFamily, GPipeAndOneFOneBIdlePMinusOneTimesFPlusBOnEveryDevice) {
  for (const char* name : {"gpipe", "1f1b"})
    for (Costs c : {Costs{1, 1, 1}, Costs{2, 1, 1}})
      for (const Case& k : sweep(name)) {
        SCOPED_TRACE(testing::Message() << name << " p=" << k.p << " m=" << k.m << " F,I,W=" << c.f << "," << c.i << ","
                                        << c.w);
        SimResult r = run(build(name, k.p, k.m), c);
        const double backward = c.i + c.w;
        EXPECT_NEAR(r.makespan, (k.m + k.p - 1) * (c.f + backward), kTolerance);
        for (int d = 0; d < k.p; ++d) EXPECT_NEAR(r.devices[d].idle, (k.p - 1) * (c.f + backward), kTolerance);
      }
}

// By hand, p = 4, m = 2, F = B = 1 (f = 1, i = 1, w = 0): device 3 runs F0 [3,4] B0 [4,5] F1 [5,6]
// B1 [6,7]; the backwards then walk down one device per unit: device 0 runs B0 [7,8] and B1 [9,10].
// Makespan 10 = (m + p - 1)(F + B), the formula of m >= p; with F = 1, B = 2 it is 15 = 5 * 3. Every
// device idles (p-1)(F+B), and device r holds min(m, p-r) micro-batches.
TEST(OneFOneBFamily, OneFOneBWithMBelowPKeepsTheBubbleAndHoldsMinOfMAndPMinusR) {
  EXPECT_NEAR(run(build("1f1b", 4, 2), Costs{1, 1, 0}).makespan, 10, kTolerance);
  EXPECT_NEAR(run(build("1f1b", 4, 2), Costs{1, 1, 1}).makespan, 15, kTolerance);
  for (Costs c : {Costs{1, 1, 1}, Costs{2, 1, 1}, Costs{1, 2, 1}})
    for (int p : {2, 3, 4, 8})
      for (int m = 1; m < p; ++m) {
        SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m << " F,I,W=" << c.f << "," << c.i << "," << c.w);
        SimResult r = run(build("1f1b", p, m), c);
        const double backward = c.i + c.w;
        EXPECT_NEAR(r.makespan, (m + p - 1) * (c.f + backward), kTolerance);
        for (int d = 0; d < p; ++d) {
          EXPECT_NEAR(r.devices[d].idle, (p - 1) * (c.f + backward), kTolerance) << "device " << d;
          EXPECT_EQ(peak(r, d), std::min(m, p - d)) << "device " << d;
        }
      }
}

// Chunk costs f, i, w: a device's whole model part costs F = v f, B = v (i + w) per micro-batch,
// and both multi-chunk schedules idle (p-1)(F+B)/v on every device.
TEST(OneFOneBFamily, InterleavedAndLoopedBfsIdlePMinusOneTimesFPlusBOverV) {
  for (const char* name : {"interleaved-1f1b", "looped-bfs"})
    for (Costs c : {Costs{1, 1, 1}, Costs{2, 1, 1}})
      for (const Case& k : sweep(name)) {
        SCOPED_TRACE(testing::Message() << name << " p=" << k.p << " m=" << k.m << " v=" << k.v << " f,i,w=" << c.f
                                        << "," << c.i << "," << c.w);
        SimResult r = run(build(name, k.p, k.m, k.v), c);
        const double device_forward = k.v * c.f, device_backward = k.v * (c.i + c.w);
        const double idle = (k.p - 1) * (device_forward + device_backward) / k.v;
        EXPECT_NEAR(r.makespan, k.m * (device_forward + device_backward) + idle, kTolerance);
        for (int d = 0; d < k.p; ++d) EXPECT_NEAR(r.devices[d].idle, idle, kTolerance);
      }
}

// Every device does the same work m(F+I+W), so every device idles the same. For m >= p that idle
// is (p-1) max(F+I-W, F, I): the paper's (p-1)(F+I-W) when W <= min(F, I); otherwise device p-1's
// start offset (p-1)F, or device 0's wait (p-1)I for the first input gradient, dominates.
TEST(OneFOneBFamily, ZbH1IdlesPMinusOneTimesMaxOfFPlusIMinusWAndFAndI) {
  for (Costs c : {Costs{1, 1, 1}, Costs{2, 1, 1}, Costs{1, 2, 1}, Costs{1, 1, 2}, Costs{3, 1, 2}})
    for (const Case& k : sweep("zb-h1")) {
      SCOPED_TRACE(testing::Message() << "p=" << k.p << " m=" << k.m << " F,I,W=" << c.f << "," << c.i << "," << c.w);
      SimResult r = run(build("zb-h1", k.p, k.m), c);
      const double idle = (k.p - 1) * std::max({c.f + c.i - c.w, c.f, c.i});
      EXPECT_NEAR(r.makespan, k.m * (c.f + c.i + c.w) + idle, kTolerance);
      for (int d = 0; d < k.p; ++d) EXPECT_NEAR(r.devices[d].idle, idle, kTolerance);
    }
  // The paper's case: F = I = W leaves a third of 1F1B's bubble.
  SimResult zb = run(build("zb-h1", 4, 16), Costs{1, 1, 1});
  SimResult one_f_one_b = run(build("1f1b", 4, 16), Costs{1, 1, 1});
  EXPECT_NEAR(3 * zb.devices[0].idle, one_f_one_b.devices[0].idle, kTolerance);
}

// With F = I = W = t and m >= 2p-1 every device is busy from its first action to its last: device
// r works in [r t, (3m + r) t], so its idle is only the start and end offsets, (p-1) t in all.
TEST(OneFOneBFamily, ZbH2HasNoGapInsideAnyDeviceWindowIffMAtLeast2PMinus1) {
  for (double t : {1.0, 2.0})
    for (int p : {2, 3, 4, 8}) {
      std::vector<int> ms = {p, 2 * p, 4 * p, 2 * p - 1, 2 * p - 2};
      for (int m : ms) {
        if (m < 1) continue;
        SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m << " t=" << t);
        Schedule s = build("zb-h2", p, m);
        Schedule lowered = lower(s);
        SimResult r = simulate(lowered, uniform_costs(p, t, t, t));
        if (m >= 2 * p - 1) {
          EXPECT_NEAR(r.makespan, (3 * m + p - 1) * t, kTolerance);
          for (int d = 0; d < p; ++d) {
            EXPECT_NEAR(gaps_inside_window(lowered, r, d), 0, kTolerance) << "device " << d;
            EXPECT_NEAR(r.devices[d].idle, (p - 1) * t, kTolerance) << "device " << d;
          }
        } else if (p > 1) {
          // Device 0 runs out of forwards before its first input gradient can start at (2p-1) t.
          EXPECT_NEAR(gaps_inside_window(lowered, r, 0), (2 * p - 1 - m) * t, kTolerance);
        }
      }
    }
}

TEST(OneFOneBFamily, PeakInFlightOfGPipeIsMAndOf1F1BIsPMinusR) {
  for (const Case& k : sweep("gpipe")) {
    SimResult r = run(build("gpipe", k.p, k.m), Costs{1, 1, 1});
    for (int d = 0; d < k.p; ++d) EXPECT_EQ(peak(r, d), k.m) << "p=" << k.p << " m=" << k.m << " device " << d;
  }
  for (const Case& k : sweep("1f1b")) {
    SimResult r = run(build("1f1b", k.p, k.m), Costs{1, 1, 1});
    for (int d = 0; d < k.p; ++d) EXPECT_EQ(peak(r, d), k.p - d) << "p=" << k.p << " m=" << k.m << " device " << d;
  }
}

// Counted in chunk activations (one unit per (stage, micro-batch)): warm-up plus the first steady
// forward, at most every forward. In whole-model units (1/v each) device 0 holds p + (p-1)/v.
TEST(OneFOneBFamily, PeakInFlightOfInterleavedIsWarmupPlusOneAndOfLoopedBfsIsMV) {
  for (const Case& k : sweep("interleaved-1f1b")) {
    SimResult r = run(build("interleaved-1f1b", k.p, k.m, k.v), Costs{1, 1, 1});
    for (int d = 0; d < k.p; ++d)
      EXPECT_EQ(peak(r, d), std::min(k.m * k.v, 2 * (k.p - d - 1) + (k.v - 1) * k.p + 1))
          << "p=" << k.p << " m=" << k.m << " v=" << k.v << " device " << d;
  }
  for (const Case& k : sweep("looped-bfs")) {
    SimResult r = run(build("looped-bfs", k.p, k.m, k.v), Costs{1, 1, 1});
    for (int d = 0; d < k.p; ++d)
      EXPECT_EQ(peak(r, d), k.m * k.v) << "p=" << k.p << " m=" << k.m << " v=" << k.v << " device " << d;
  }
}

// Uniform costs hold a micro-batch's activation until its W ends. Counted so, ZB-H1 keeps p
// micro-batches on every device (device r's r held-back W's add to its p-r), the first device's
// 1F1B peak; ZB-H2 keeps 2p-1 on every device. Counted until I ends (W needing little), they
// keep p-r and 2(p-r)-1 on device r.
TEST(OneFOneBFamily, PeakInFlightOfZeroBubbleSchedules) {
  for (bool freed_by_input : {false, true})
    for (const std::string& name : std::vector<std::string>{"zb-h1", "zb-h2"})
      for (const Case& k : sweep(name)) {
        if (name == "zb-h2" && k.m < 2 * k.p - 1) continue;
        SCOPED_TRACE(testing::Message() << name << " p=" << k.p << " m=" << k.m << " freed by I: " << freed_by_input);
        CostTable costs = uniform_costs(k.p, 1, 1, 1);
        if (freed_by_input)
          for (StageCosts& stage : costs.stages) stage.freed_by_input = stage.activation_bytes;
        SimResult r = run(build(name, k.p, k.m), costs);
        for (int d = 0; d < k.p; ++d) {
          const int expected =
              name == "zb-h1" ? (freed_by_input ? k.p - d : k.p) : (freed_by_input ? 2 * (k.p - d) - 1 : 2 * k.p - 1);
          EXPECT_EQ(peak(r, d), expected) << "device " << d;
        }
      }
}

}  // namespace
}  // namespace flexpipe
