// The V family of built-in generators (ZB-V, V-Half, V-Min, DualPipeV, DualPipe; ZB-V adaptive has
// its own tests in zb_v_adaptive_test.cpp, and is in the sweeps here): exact orders on
// hand-computed cases (and against PyTorch's published DualPipeV artifact when it is placed under
// ../shared/reference/pytorch/), validity over a sweep of (p, m), the documented requirements, and
// the bubble and memory statements of the "V family and DualPipe" section of the schedule docs,
// checked against the simulator with uniform costs and free communication.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/interop/pytorch_csv.h"
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

const std::vector<std::string> kFamily = {"zb-v", "zb-v-adaptive", "v-half", "v-min", "dualpipev", "dualpipe"};

bool accepted(const std::string& name, int p, int m) {
  const BuiltinSchedule* builtin = find_builtin(name);
  return builtin->check({p, m, builtin->default_chunks}).empty();
}

// ---------------------------------------------------------------------------------------------
// Registry and structure

TEST(VFamily, RegistersEveryScheduleWithTwoFixedChunksExceptDualPipe) {
  for (const std::string& name : kFamily) {
    const BuiltinSchedule* builtin = find_builtin(name);
    ASSERT_NE(builtin, nullptr) << name;
    EXPECT_EQ(builtin->name, name);
    EXPECT_EQ(builtin->default_chunks, name == "dualpipe" ? 1 : 2) << name;
    EXPECT_FALSE(builtin->chunks_adjustable) << name;
    EXPECT_FALSE(builtin->description.empty()) << name;
  }
  EXPECT_EQ(find_builtin("ZB_V"), find_builtin("zb-v"));
  EXPECT_EQ(find_builtin("DualPipeV"), find_builtin("dualpipev"));
}

TEST(VFamily, EveryGeneratedScheduleIsValidComputeOnlyAndDeterministic) {
  for (const std::string& name : kFamily)
    for (int p : {1, 2, 3, 4, 5, 8})
      for (int m = 1; m <= 4 * p + 1; ++m) {
        if (!accepted(name, p, m)) continue;
        SCOPED_TRACE(testing::Message() << name << " p=" << p << " m=" << m);
        const bool dual = name == "dualpipev" || name == "dualpipe";
        Schedule s = build(name, p, m);
        EXPECT_EQ(s.name, name);
        EXPECT_EQ(s.num_devices, p);
        EXPECT_EQ(s.num_microbatches, m);
        EXPECT_FALSE(s.has_communication());
        if (name == "dualpipe") {
          EXPECT_EQ(s.num_pipelines, 2);
          EXPECT_EQ(s.stage_device, bidirectional_placement(p));
          std::vector<int32_t> halves(m, 0);
          std::fill(halves.begin() + m / 2, halves.end(), 1);
          EXPECT_EQ(s.microbatch_pipeline, halves);
        } else {
          EXPECT_EQ(s.num_pipelines, 1);
          EXPECT_EQ(s.stage_device, v_placement(p, 2 * p));
        }
        for (const auto& actions : s.device_actions)
          for (const Action& a : actions) {
            const bool allowed =
                a.kind == ActionKind::F || a.kind == ActionKind::I || a.kind == ActionKind::W ||
                (dual && (a.kind == ActionKind::B || (a.kind == ActionKind::Overlap && a.sub_kind == ActionKind::B)));
            EXPECT_TRUE(allowed) << s.action_name(a);
          }
        std::vector<Diagnostic> diagnostics = validate(s);
        for (const Diagnostic& d : diagnostics) ADD_FAILURE() << d.to_string();
        EXPECT_EQ(build(name, p, m), s);
      }
}

// ---------------------------------------------------------------------------------------------
// Orders

// Hand-run of the phase program for p = 2, m = 4 (2p-1 = 3 <= m, so nothing is padded). Device 0:
// 3 first-leg F, no pairs, 2 triples (3F, 3I, 3W), the steady block twice (the second without its
// F), 2 pairs (0I, 0W). Device 1: 1 first-leg F, 1 pair, 1 triple, the steady block twice, one
// pair of I's, one (1I, 1W), then the held W's, second leg first.
TEST(VFamily, ZbVRunsPyTorchsPhaseProgram) {
  Schedule s = build("zb-v", 2, 4);
  EXPECT_EQ(row(s, 0),
            "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3");
  EXPECT_EQ(row(s, 1),
            "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3");
}

// Fewer micro-batches than 2p-1: the program runs for 2p-1 and drops the rest, keeping the order.
TEST(VFamily, ZbVDropsThePaddingMicroBatches) {
  Schedule s = build("zb-v", 2, 1);
  EXPECT_EQ(row(s, 0), "0F0 3F0 3I0 3W0 0I0 0W0");
  EXPECT_EQ(row(s, 1), "1F0 2F0 2I0 2W0 1I0 1W0");
}

// Hand-run of the eight phases for p = n = 4, m = k = 10 (k-2n+r+1 = r+3 pairs in phase 4).
// Device 0 (r = 0, legs: stage 0 and stage 7): 6 x F0; 1 x (F0, F1); 3 x (I1, W, F1); 3 x
// (F0&B1, F1&B0); 3 x (B1, F1&B0); 1 x (B1, B0) with the B0 split (even r); 3 x (W, I0); 1 x W.
// Device 3 (r = 3, legs: stage 3 and stage 4): 4 x (F0, F1); 6 x (F0&B1, F1&B0), the first
// F0&B1 split into F0 then B1 (rank n-1); 4 x (B1, B0), split into I from the third pair on,
// before B1 (odd r); 4 x W, oldest first.
TEST(VFamily, DualPipeVRunsTheEightPhasesOnTheV) {
  Schedule s = build("dualpipev", 4, 10);
  EXPECT_EQ(row(s, 0),
            "0F0 0F1 0F2 0F3 0F4 0F5 "
            "0F6 7F0 "
            "7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 "
            "(0F7;7B3)OVERLAP_F_B (7F4;0B0)OVERLAP_F_B (0F8;7B4)OVERLAP_F_B (7F5;0B1)OVERLAP_F_B "
            "(0F9;7B5)OVERLAP_F_B (7F6;0B2)OVERLAP_F_B "
            "7B6 (7F7;0B3)OVERLAP_F_B 7B7 (7F8;0B4)OVERLAP_F_B 7B8 (7F9;0B5)OVERLAP_F_B "
            "7B9 0I6 "
            "0W6 0I7 0W7 0I8 0W8 0I9 "
            "0W9");
  EXPECT_EQ(row(s, 3),
            "3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 "
            "3F4 4B0 (4F4;3B0)OVERLAP_F_B (3F5;4B1)OVERLAP_F_B (4F5;3B1)OVERLAP_F_B (3F6;4B2)OVERLAP_F_B "
            "(4F6;3B2)OVERLAP_F_B (3F7;4B3)OVERLAP_F_B (4F7;3B3)OVERLAP_F_B (3F8;4B4)OVERLAP_F_B "
            "(4F8;3B4)OVERLAP_F_B (3F9;4B5)OVERLAP_F_B (4F9;3B5)OVERLAP_F_B "
            "4B6 3B6 4B7 3B7 4I8 3I8 4I9 3I9 "
            "4W8 3W8 4W9 3W9");
}

// PyTorch's published dualpipev_4rank_10mb.csv (ScheduleDualPipeV's output, from
// test/distributed/pipelining/artifacts/) is not part of this repository; placed under the steering
// repository's shared/reference/pytorch/, it is compared row for row.
TEST(VFamily, DualPipeVMatchesPyTorchsPublishedScheduleWhenPresent) {
  const std::filesystem::path reference_file =
      std::filesystem::path(FLEXPIPE_TEST_DATA) / "../../../shared/reference/pytorch/dualpipev_4rank_10mb.csv";
  if (!std::filesystem::exists(reference_file))
    GTEST_SKIP() << "PyTorch's dualpipev_4rank_10mb.csv is not at " << reference_file.lexically_normal().string()
                 << "; place it there to compare against it";
  Schedule reference = load_pytorch_csv(reference_file.string());
  Schedule s = build("dualpipev", 4, 10);
  EXPECT_EQ(s.stage_device, reference.stage_device);
  for (int d = 0; d < 4; ++d) EXPECT_EQ(row(s, d), row(reference, d)) << "device " << d;
}

// p = 2: one rank per half (n = 1, r = 0), k = 2 micro-batches per direction. Phases 2, 4 (the
// first pair split: the middle rank), 6 (full B1, then I0) and 8 (the one W).
TEST(VFamily, DualPipeRunsTheEightPhasesFromBothEnds) {
  Schedule s = build("dualpipe", 2, 4);
  EXPECT_EQ(row(s, 0), "0F0 3F2 0F1 3B2 (3F3;0B0)OVERLAP_F_B 3B3 0I1 0W1");
  EXPECT_EQ(row(s, 1), "2F2 1F0 2F3 1B0 (1F1;2B2)OVERLAP_F_B 1B1 2I3 2W3");
}

TEST(VFamily, DualPipeMirrorsItsDevicesAcrossTheMiddle) {
  // Device d and device p-1-d run the same program, each on its own first-leg direction.
  const int p = 8, m = 16, half = m / 2;
  Schedule s = build("dualpipe", p, m);
  auto mirrored = [&](Action a) {
    auto flip_stage = [&](int stage) { return stage < p ? p + stage : stage - p; };
    auto flip_mb = [&](int mb) { return mb < half ? mb + half : mb - half; };
    a.stage = flip_stage(a.stage);
    a.microbatch = flip_mb(a.microbatch);
    if (a.kind == ActionKind::Overlap) {
      a.stage2 = flip_stage(a.stage2);
      a.microbatch2 = flip_mb(a.microbatch2);
    }
    return a;
  };
  for (int d = 0; d < p / 2; ++d) {
    std::vector<Action> flipped;
    for (const Action& a : s.device_actions[d]) flipped.push_back(mirrored(a));
    EXPECT_EQ(flipped, s.device_actions[p - 1 - d]) << "device " << d;
  }
}

// A building-block schedule: past warm-up, every device repeats a block of 6 actions with each
// micro-batch one higher, for at least m - 2p micro-batches.
TEST(VFamily, VHalfAndVMinRepeatTheirBuildingBlockInSteadyState) {
  for (const char* name : {"v-half", "v-min"})
    for (int p : {2, 4, 8}) {
      const int m = 4 * p;
      Schedule s = build(name, p, m);
      for (int d = 0; d < p; ++d) {
        const auto& actions = s.device_actions[d];
        int repeated = 0;
        for (size_t j = 0; j + 6 < actions.size(); ++j) {
          Action shifted = actions[j];
          ++shifted.microbatch;
          repeated += actions[j + 6] == shifted;
        }
        EXPECT_GE(repeated, 6 * (m - 2 * p)) << name << " p=" << p << " device " << d;
      }
    }
}

// ---------------------------------------------------------------------------------------------
// Requirements

TEST(VFamily, DualPipeVNeedsTwoMicroBatchesPerDevice) {
  EXPECT_EQ(find_builtin("dualpipev")->check({4, 7, 2}), "needs m >= 2p = 8 micro-batches (one per stage of the V)");
  EXPECT_EQ(find_builtin("dualpipev")->check({4, 8, 2}), "");
  EXPECT_EQ(build_error("dualpipev", 4, 7),
            "dualpipev with p=4, m=7, v=2: needs m >= 2p = 8 micro-batches (one per stage of the V)");
  EXPECT_EQ(build_error("dualpipev", 3, 7), "");
}

TEST(VFamily, DualPipeNeedsEvenDevicesEvenMicroBatchesAndTwoPerDevice) {
  EXPECT_EQ(build_error("dualpipe", 3, 6),
            "dualpipe with p=3, m=6, v=1: needs an even number of devices (the two directions meet in the middle)");
  EXPECT_EQ(build_error("dualpipe", 4, 9),
            "dualpipe with p=4, m=9, v=1: needs an even m (half of the micro-batches run in each direction)");
  EXPECT_EQ(build_error("dualpipe", 4, 6),
            "dualpipe with p=4, m=6, v=1: needs m >= 2p = 8 micro-batches (p per direction)");
  EXPECT_EQ(build_error("dualpipe", 4, 10), "");
}

TEST(VFamily, VSchedulesTakeAnyMicroBatchCountAndDefaultTo2P) {
  for (const char* name : {"zb-v", "zb-v-adaptive", "v-half", "v-min"})
    for (int m : {1, 3, 5}) EXPECT_EQ(build_error(name, 4, m), "") << name << " m=" << m;
  for (const std::string& name : kFamily) EXPECT_EQ(build(name, 4, 0).num_microbatches, 8) << name;
}

TEST(VFamily, ChunkCountsAreFixed) {
  EXPECT_EQ(build_error("zb-v", 4, 8, 3), "zb-v: has exactly 2 chunks per device (got v=3)");
  EXPECT_EQ(build_error("v-min", 4, 8, 1), "v-min: has exactly 2 chunks per device (got v=1)");
  EXPECT_EQ(build_error("dualpipe", 4, 8, 2), "dualpipe: has exactly 1 chunk per device (got v=2)");
}

// ---------------------------------------------------------------------------------------------
// Formulas, from the simulator with uniform costs and free communication

CostTable costs_for(const Schedule& schedule, double f, double i, double w, double overlap_ratio = 1.0) {
  CostTable costs = uniform_costs(schedule.stages_per_pipeline, f, i, w);
  costs.overlap_ratio = overlap_ratio;
  return costs;
}

double max_idle(const SimResult& result) {
  double idle = 0;
  for (const DeviceReport& device : result.devices) idle = std::max(idle, device.idle);
  return idle;
}

// 1F1B on the same model: one stage per device, made of the device's two chunks.
double one_f_one_b_idle(int p, int m, double f, double i, double w) {
  return max_idle(run(build("1f1b", p, m), uniform_costs(p, 2 * f, 2 * i, 2 * w)));
}

// With F = I = W = t and m >= 2p-1 device d works without a gap in [d t, (6m + d) t]; below, device
// 0 waits 2(2p-1-m) t for its first input gradient.
TEST(VFamily, ZbVHasNoGapInsideAnyDeviceWindowIffMAtLeast2PMinus1) {
  for (double t : {1.0, 2.0})
    for (int p : {2, 3, 4, 8})
      for (int m : {2 * p, 3 * p, 4 * p, 2 * p - 1, 2 * p - 2, p}) {
        SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m << " t=" << t);
        Schedule lowered = lower(build("zb-v", p, m));
        SimResult r = simulate(lowered, uniform_costs(2 * p, t, t, t));
        if (m >= 2 * p - 1) {
          EXPECT_NEAR(r.makespan, (6 * m + p - 1) * t, kTolerance);
          for (int d = 0; d < p; ++d) {
            EXPECT_NEAR(gaps_inside_window(lowered, r, d), 0, kTolerance) << "device " << d;
            EXPECT_NEAR(r.devices[d].idle, (p - 1) * t, kTolerance) << "device " << d;
          }
        } else {
          EXPECT_NEAR(gaps_inside_window(lowered, r, 0), 2 * (2 * p - 1 - m) * t, kTolerance);
        }
      }
}

// A chunk's activation counted 1/2, so that a device's two chunks of a micro-batch weigh what one
// 1F1B stage of the same model does: ZB-V holds p micro-batches (1F1B's first device), V-Half
// (p+2)/2 and V-Min (p+4)/3, on every device.
TEST(VFamily, PeakActivationOfVSchedulesInMicroBatchesOfAFullStage) {
  for (int p : {2, 4, 8})
    for (int m : {2 * p, 3 * p, 4 * p})
      for (const char* name : {"zb-v", "v-half", "v-min"}) {
        SCOPED_TRACE(testing::Message() << name << " p=" << p << " m=" << m);
        Schedule s = build(name, p, m);
        CostTable costs = costs_for(s, 1, 1, 1);
        for (StageCosts& stage : costs.stages) stage.activation_bytes = 0.5;
        SimResult r = run(s, costs);
        const std::string n = name;
        const double expected = n == "zb-v" ? p : n == "v-half" ? (p + 2) / 2 : (p + 4) / 3;
        for (int d = 0; d < p; ++d) EXPECT_EQ(r.devices[d].peak_memory, expected) << "device " << d;
      }
}

// Every device does the same work 2m(F+I+W), so all idle alike. With F = I = W = t the bubble does
// not depend on m (the block repeats without gaps) and is at most 1/2 (V-Half) and 2/3 (V-Min) of
// 1F1B's 6(p-1)t on the same model, V-Min's above V-Half's; the documented values are 1, 5, 17 t
// (V-Half) and 2, 11, 27 t (V-Min) for p = 2, 4, 8.
TEST(VFamily, VHalfAndVMinBubblesAgainst1F1B) {
  struct Documented {
    int p;
    double half, min;
  };
  for (double t : {1.0, 2.0})
    for (Documented documented : {Documented{2, 1, 2}, Documented{4, 5, 11}, Documented{8, 17, 27}}) {
      const int p = documented.p;
      SCOPED_TRACE(testing::Message() << "p=" << p << " t=" << t);
      const double reference = one_f_one_b_idle(p, 4 * p, t, t, t);
      EXPECT_NEAR(reference, 6 * (p - 1) * t, kTolerance);
      double bubble[2] = {0, 0};
      for (int k = 0; k < 2; ++k) {
        const std::string name = k == 0 ? "v-half" : "v-min";
        for (int m : {2 * p, 3 * p, 4 * p}) {
          Schedule s = build(name, p, m);
          SimResult r = run(s, costs_for(s, t, t, t));
          for (int d = 0; d < p; ++d) EXPECT_NEAR(r.devices[d].idle, r.makespan - 6 * m * t, kTolerance);
          if (m == 2 * p) bubble[k] = r.makespan - 6 * m * t;
          EXPECT_NEAR(r.makespan - 6 * m * t, bubble[k], kTolerance) << name << " m=" << m;
        }
      }
      EXPECT_LE(bubble[0], reference / 2 + kTolerance);
      EXPECT_LE(bubble[1], reference * 2 / 3 + kTolerance);
      EXPECT_LT(bubble[0], bubble[1]);
      EXPECT_NEAR(bubble[0], documented.half * t, kTolerance);
      EXPECT_NEAR(bubble[1], documented.min * t, kTolerance);
    }
}

// DeepSeek's bubble (S/2-1)(F&B + B - 3W), S stages per pipeline (DualPipeV 2p, DualPipe p),
// B = I + W, F&B = overlap_ratio (F + B), is exact for the idlest device when F = I >= W and
// F&B >= B: DualPipeV's last device, DualPipe's two middle ones. With no overlap gain
// (overlap_ratio 1) and F = I = W every device idles exactly that.
TEST(VFamily, DualPipeBubbleFormulaHoldsExactlyOnTheIdlestDevice) {
  struct Costs {
    double f, i, w;
  };
  for (const char* name : {"dualpipev", "dualpipe"})
    for (Costs c : {Costs{1, 1, 1}, Costs{2, 2, 2}, Costs{2, 2, 1}})
      for (double ratio : {1.0, 0.8, 0.7})
        for (int p : {2, 4, 8})
          for (int m : {2 * p, 3 * p, 4 * p}) {
            SCOPED_TRACE(testing::Message() << name << " p=" << p << " m=" << m << " F,I,W=" << c.f << "," << c.i << ","
                                            << c.w << " overlap_ratio=" << ratio);
            const bool bidirectional = std::string(name) == "dualpipe";
            Schedule s = build(name, p, m);
            SimResult r = run(s, costs_for(s, c.f, c.i, c.w, ratio));
            const double b = c.i + c.w, fb = ratio * (c.f + b);
            const int stages = bidirectional ? p : 2 * p;
            const double bubble = (stages / 2 - 1) * (fb + b - 3 * c.w);
            EXPECT_NEAR(max_idle(r), bubble, kTolerance);
            const std::vector<int> idlest =
                bidirectional ? std::vector<int>{p / 2 - 1, p / 2} : std::vector<int>{p - 1};
            for (int d : idlest) EXPECT_NEAR(r.devices[d].idle, bubble, kTolerance) << "device " << d;
            if (ratio == 1.0 && c.w == c.i) {
              for (int d = 0; d < p; ++d) EXPECT_NEAR(r.devices[d].idle, bubble, kTolerance) << "device " << d;
            }
          }
}

// Counted in stage activations: every device holds S + 1 (S stages per pipeline), DeepSeek's
// PP + 1 — the +1 is the forward half of an F&B pair allocating before its backward half frees.
TEST(VFamily, DualPipePeakActivationIsStagesPlusOne) {
  for (const char* name : {"dualpipev", "dualpipe"})
    for (int p : {2, 4, 8})
      for (int m : {2 * p, 3 * p, 4 * p}) {
        Schedule s = build(name, p, m);
        SimResult r = run(s, costs_for(s, 1, 1, 1));
        const int stages = std::string(name) == "dualpipe" ? p : 2 * p;
        for (int d = 0; d < p; ++d)
          EXPECT_EQ(r.devices[d].peak_memory, stages + 1) << name << " p=" << p << " m=" << m << " device " << d;
      }
}

// Which stages split their backward: an I alone marks its stage, an overlap's I half marks the
// backward's stage (not the forward's), and a B marks nothing.
TEST(SplitBackwardStages, MarksTheStagesOfIActionsAloneAndInsideOverlaps) {
  Schedule s = make_schedule("hand", 2, 2, {0, 1, 1, 0}, 2);
  s.device_actions[0] = {Action::make(ActionKind::F, 0, 0), Action::overlap(3, 1, 0, 0, ActionKind::I),
                         Action::make(ActionKind::W, 0, 0)};
  s.device_actions[1] = {Action::make(ActionKind::F, 1, 0), Action::make(ActionKind::B, 1, 0),
                         Action::make(ActionKind::F, 2, 1)};
  EXPECT_EQ(split_backward_stages(s), (std::vector<char>{1, 0, 0, 0}));
  s.device_actions[1].push_back(Action::make(ActionKind::I, 2, 1));
  EXPECT_EQ(split_backward_stages(s), (std::vector<char>{1, 0, 1, 0}));
  EXPECT_EQ(split_backward_stages(build("1f1b", 4, 8)), std::vector<char>(4, 0));
  EXPECT_EQ(split_backward_stages(build("zb-v", 4, 8)), std::vector<char>(8, 1));
}
}  // namespace
}  // namespace flexpipe
