// Tests of the verifier: diagnostics' forms, valid hand-made schedules, every rule's violation.
#include "flexpipe/validate/validator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <sstream>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

using K = ActionKind;

// ---- building schedules by hand ------------------------------------------------------------------

// One cell of our cell form: "2F0", "0OPT", "1SEND_F3", a declared custom name, or
// "(0F7;7B3)OVERLAP_F_B".
Action parse_cell(const Schedule& s, const std::string& text) {
  if (text.front() == '(') {
    size_t semicolon = text.find(';'), close = text.find(')');
    Action f = parse_cell(s, text.substr(1, semicolon - 1));
    Action b = parse_cell(s, text.substr(semicolon + 1, close - semicolon - 1));
    return Action::overlap(f.stage, f.microbatch, b.stage, b.microbatch, b.kind);
  }
  size_t kind_start = 0;
  while (std::isdigit(static_cast<unsigned char>(text[kind_start]))) ++kind_start;
  size_t kind_end = kind_start;
  while (kind_end < text.size() && !std::isdigit(static_cast<unsigned char>(text[kind_end]))) ++kind_end;
  int stage = std::stoi(text.substr(0, kind_start));
  std::string kind = text.substr(kind_start, kind_end - kind_start);
  int microbatch = kind_end < text.size() ? std::stoi(text.substr(kind_end)) : -1;
  for (int k = 0; k < kNumActionKinds; ++k)
    if (kind_name(static_cast<K>(k)) == kind) return Action::make(static_cast<K>(k), stage, microbatch);
  for (size_t c = 0; c < s.custom_ops.size(); ++c)
    if (s.custom_ops[c].name == kind) return Action::custom_op(static_cast<uint16_t>(c), stage, microbatch);
  ADD_FAILURE() << "unknown cell " << text;
  return {};
}

std::vector<Action> parse_row(const Schedule& s, const std::string& row) {
  std::vector<Action> actions;
  std::istringstream in(row);
  for (std::string cell; in >> cell;) actions.push_back(parse_cell(s, cell));
  return actions;
}

void set_rows(Schedule& s, const std::vector<std::string>& rows) {
  for (size_t d = 0; d < rows.size(); ++d) s.device_actions[d] = parse_row(s, rows[d]);
}

Schedule hand_made(int devices, int microbatches, std::vector<int32_t> placement,
                   const std::vector<std::string>& rows) {
  Schedule s = make_schedule("hand", devices, microbatches, std::move(placement));
  set_rows(s, rows);
  return s;
}

struct Variant {
  bool split_backward = false;  // I then W instead of B
  bool optimizer = false;       // OPT at the end of each device
};

// 1F1B with one stage per device (loop placement): p - 1 - d warm-up forwards, then one forward
// one backward, then the remaining backwards.
Schedule one_f_one_b(int devices, int microbatches, Variant variant = {}) {
  Schedule s = make_schedule("1f1b", devices, microbatches, loop_placement(devices, devices));
  for (int d = 0; d < devices; ++d) {
    std::vector<Action>& list = s.device_actions[d];
    auto backward = [&](int m) {
      if (variant.split_backward) {
        list.push_back(Action::make(K::I, d, m));
        list.push_back(Action::make(K::W, d, m));
      } else {
        list.push_back(Action::make(K::B, d, m));
      }
    };
    int warmup = std::min(devices - 1 - d, microbatches);
    for (int m = 0; m < warmup; ++m) list.push_back(Action::make(K::F, d, m));
    for (int m = warmup; m < microbatches; ++m) {
      list.push_back(Action::make(K::F, d, m));
      backward(m - warmup);
    }
    for (int m = microbatches - warmup; m < microbatches; ++m) backward(m);
    if (variant.optimizer) list.push_back(Action::make(K::Opt, d));
  }
  return s;
}

// Looped BFS with `chunks` stages per device: every forward of a chunk, chunk after chunk, then
// every backward in reverse.
Schedule looped_bfs(int devices, int microbatches, int chunks) {
  Schedule s = make_schedule("looped-bfs", devices, microbatches, loop_placement(devices, devices * chunks));
  for (int d = 0; d < devices; ++d) {
    std::vector<Action>& list = s.device_actions[d];
    for (int c = 0; c < chunks; ++c)
      for (int m = 0; m < microbatches; ++m) list.push_back(Action::make(K::F, c * devices + d, m));
    for (int c = chunks - 1; c >= 0; --c)
      for (int m = 0; m < microbatches; ++m) list.push_back(Action::make(K::B, c * devices + d, m));
  }
  return s;
}

std::vector<std::string> lines(const Schedule& s) {
  std::vector<std::string> out;
  for (const Diagnostic& d : validate(s)) out.push_back(d.to_string());
  return out;
}

using Lines = std::vector<std::string>;

int find_position(const Schedule& s, int device, const std::string& cell) {
  const std::vector<Action>& list = s.device_actions[device];
  for (size_t p = 0; p < list.size(); ++p)
    if (s.action_name(list[p]) == cell) return static_cast<int>(p);
  ADD_FAILURE() << cell << " not on device " << device;
  return -1;
}

// Moves the action named `cell` on `device` to right after the action named `anchor`.
void move_after(Schedule& s, int device, const std::string& cell, const std::string& anchor) {
  std::vector<Action>& list = s.device_actions[device];
  Action moved = list[find_position(s, device, cell)];
  list.erase(list.begin() + find_position(s, device, cell));
  list.insert(list.begin() + find_position(s, device, anchor) + 1, moved);
}

// ---- the message format --------------------------------------------------------------------------

TEST(Diagnostic, ToStringHasOneFormPerKindOfLocation) {
  EXPECT_EQ((Diagnostic{1, 5, "1F3", "must run after 0F3 (#7)"}.to_string()),
            "device 1 #5 1F3: must run after 0F3 (#7)");
  EXPECT_EQ((Diagnostic{2, -1, "2F3", "missing 2F3"}.to_string()), "device 2: missing 2F3");
  EXPECT_EQ((Diagnostic{-1, -1, "", "deadlock: x"}.to_string()), "deadlock: x");
}

// ---- valid schedules -----------------------------------------------------------------------------

TEST(Validator, HandMade1F1BIsValidForTwoToFourDevices) {
  for (int p = 2; p <= 4; ++p) {
    for (int m : {1, p, 2 * p + 1}) {
      EXPECT_EQ(lines(one_f_one_b(p, m)), Lines{}) << "p=" << p << " m=" << m;
      EXPECT_EQ(lines(one_f_one_b(p, m, {.split_backward = true, .optimizer = true})), Lines{}) << "p=" << p;
    }
  }
}

TEST(Validator, RecomputeOffloadAndCustomActionsInTheirPlaceAreValid) {
  Schedule s = make_schedule("extras", 2, 1, loop_placement(2, 2));
  s.custom_ops.push_back({.name = "ALLREDUCE",
                          .after = {{.kind = K::W, .all_microbatches = true}},
                          .before = {{.kind = K::Opt}},
                          .per_microbatch = false});
  set_rows(s, {"0F0 0OFFLOAD0 0RELOAD0 0R0 0I0 0W0 0ALLREDUCE 0OPT", "1F0 1B0 1OPT"});
  EXPECT_EQ(lines(s), Lines{});
}

TEST(Validator, VPlacementWithLocalTurnIsValid) {
  // Device 0 holds stages 0 and 3, device 1 holds 1 and 2.
  Schedule s =
      hand_made(2, 2, v_placement(2, 4), {"0F0 0F1 3F0 3B0 3F1 3B1 0B0 0B1", "1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1"});
  EXPECT_EQ(lines(s), Lines{});
}

TEST(Validator, OverlapCountsAsItsForwardAndBackwardHalves) {
  Schedule s = hand_made(2, 2, loop_placement(2, 2), {"0F0 0F1 0B0 0B1", "1F0 (1F1;1B0)OVERLAP_F_B 1B1"});
  EXPECT_EQ(lines(s), Lines{});
}

// DualPipe-like: pipeline 0 runs stages 0 (device 0) and 1 (device 1), pipeline 1 runs stages 2
// (device 1) and 3 (device 0); micro-batch 0 goes through pipeline 0, micro-batch 1 through 1.
Schedule two_pipelines() {
  Schedule s = make_schedule("bidirectional", 2, 2, bidirectional_placement(2), 2);
  s.microbatch_pipeline = {0, 1};
  set_rows(s, {"0F0 3F1 3B1 0B0", "2F1 1F0 1B0 2B1"});
  return s;
}

TEST(Validator, TwoPipelinesEachMicroBatchInItsOwn) { EXPECT_EQ(lines(two_pipelines()), Lines{}); }

TEST(Validator, LargeHandMade1F1BValidates) {
  EXPECT_EQ(lines(one_f_one_b(64, 512, {.split_backward = true, .optimizer = true})), Lines{});
}

TEST(Validator, LargeTwoChunkScheduleValidatesBeforeAndAfterLowering) {
  Schedule s = looped_bfs(64, 512, 2);
  EXPECT_EQ(lines(s), Lines{});
  EXPECT_EQ(lines(lower(s)), Lines{});
}

// ---- rule 1: shape -------------------------------------------------------------------------------

TEST(Validator, ShapeOfTheScheduleItself) {
  Schedule lists = one_f_one_b(2, 1);
  lists.device_actions.pop_back();
  EXPECT_EQ(lines(lists), Lines{"schedule has 1 action lists for 2 devices"});

  Schedule placement = one_f_one_b(2, 1);
  placement.stage_device = {0, 2};
  EXPECT_EQ(lines(placement), Lines{"stage 1 is placed on device 2, which does not exist (2 devices)"});
  placement.stage_device = {0};
  EXPECT_EQ(lines(placement), Lines{"stage placement lists 1 stages, the schedule has 2"});

  Schedule pipelines = two_pipelines();
  pipelines.microbatch_pipeline = {0, 2};
  EXPECT_EQ(lines(pipelines), Lines{"micro-batch 1 is assigned to pipeline 2, which does not exist (2 pipelines)"});
  pipelines.microbatch_pipeline = {0};
  EXPECT_EQ(lines(pipelines), Lines{"micro-batch pipeline map lists 1 micro-batches, the schedule has 2"});

  Schedule empty;
  EXPECT_EQ(lines(empty), (Lines{"schedule has 0 devices; it needs at least one",
                                 "schedule has 0 micro-batches; it needs at least one",
                                 "schedule has 0 stages per pipeline and 1 pipelines; it needs at least one of each"}));
}

TEST(Validator, ShapeOfEachAction) {
  Schedule s = one_f_one_b(2, 1);
  s.device_actions[0].push_back(Action::make(K::F, 2, 0));
  s.device_actions[0].push_back(Action::make(K::F, 0, 1));
  s.device_actions[0].push_back(Action::make(K::Opt, 0, 0));
  s.device_actions[0].push_back(Action::custom_op(3, 0, 0));
  s.device_actions[1].push_back(Action::overlap(1, 0, 1, 0, K::W));
  EXPECT_EQ(lines(s), (Lines{"device 0 #2 2F0: stage 2 does not exist (2 stages)",
                             "device 0 #3 0F1: micro-batch 1 does not exist (1 micro-batches)",
                             "device 0 #4 0OPT0: OPT is stage-wide and takes no micro-batch",
                             "device 0 #5 0CUSTOM3_0: custom kind 3 is not declared (0 declared)",
                             "device 1 #2 (1F0;1W0)OVERLAP_F_B: an overlap's backward half must be B or I, not W"}));
}

// ---- rules 2-3: placement and counts -------------------------------------------------------------

TEST(Validator, MissingActionIsNamedOnItsStagesDevice) {
  Schedule s = one_f_one_b(2, 4);
  auto& list = s.device_actions[1];
  list.erase(list.begin() + find_position(s, 1, "1F2"));
  EXPECT_EQ(lines(s), Lines{"device 1: missing 1F2"});

  Schedule no_backward = one_f_one_b(2, 4);
  no_backward.device_actions[0].pop_back();
  EXPECT_EQ(lines(no_backward), Lines{"device 0: missing 0B3 (or 0I3 and 0W3)"});
}

TEST(Validator, DuplicateNamesTheFirstOccurrence) {
  Schedule s = one_f_one_b(2, 4);
  s.device_actions[0].push_back(Action::make(K::F, 0, 1));
  EXPECT_EQ(lines(s), Lines{"device 0 #8 0F1: duplicate: 0F1 already at #1"});
}

TEST(Validator, WrongPlacementAlsoLeavesTheHomeDeviceMissingIt) {
  Schedule s = hand_made(2, 1, loop_placement(2, 2), {"0F0 1F0 0B0", "1B0"});
  EXPECT_EQ(lines(s), (Lines{"device 0 #1 1F0: wrong placement: stage 1 is on device 1", "device 1: missing 1F0"}));
}

TEST(Validator, OverlapHalvesAreCheckedEachOnItsOwn) {
  Schedule s = hand_made(2, 2, loop_placement(2, 2), {"0F0 0F1 0B0 0B1", "1F0 (0F1;1B0)OVERLAP_F_B 1F1 1B1"});
  EXPECT_EQ(lines(s), Lines{"device 1 #1 (0F1;1B0)OVERLAP_F_B: wrong placement: stage 0 is on device 0"});
}

TEST(Validator, MicroBatchOfAnotherPipelineIsRejected) {
  Schedule s = two_pipelines();
  s.device_actions[0].push_back(Action::make(K::R, 0, 1));
  EXPECT_EQ(lines(s), Lines{"device 0 #4 0R1: micro-batch 1 runs in pipeline 1, stage 0 belongs to pipeline 0"});
}

TEST(Validator, SplitAndFullBackwardDoNotMix) {
  Schedule s = one_f_one_b(2, 1);
  s.device_actions[0].push_back(Action::make(K::I, 0, 0));
  EXPECT_EQ(lines(s), Lines{"device 0 #2 0I0: mixes split and full backward: 0B0 at #1"});
}

TEST(Validator, SplitBackwardNeedsBothHalves) {
  Schedule s = one_f_one_b(2, 2, {.split_backward = true});
  auto& list = s.device_actions[1];
  list.erase(list.begin() + find_position(s, 1, "1W1"));
  list.erase(list.begin() + find_position(s, 1, "1I0"));
  EXPECT_EQ(lines(s), (Lines{"device 1: missing 1I0", "device 1: missing 1W1"}));
}

// ---- rule 4 and the order rules of rule 3 --------------------------------------------------------

TEST(Validator, DataDependenciesOnOneDeviceMustBeInOrder) {
  // One device holds both stages of the pipeline.
  Schedule s = hand_made(1, 1, {0, 0}, {"1F0 0F0 0B0 1B0"});
  EXPECT_EQ(lines(s), (Lines{"device 0 #0 1F0: must run after 0F0 (#1)", "device 0 #2 0B0: must run after 1B0 (#3)"}));

  Schedule backward_first = one_f_one_b(2, 1);
  std::swap(backward_first.device_actions[1][0], backward_first.device_actions[1][1]);
  EXPECT_EQ(lines(backward_first), Lines{"device 1 #0 1B0: must run after 1F0 (#1)"});
}

TEST(Validator, WeightGradientAfterInputGradient) {
  Schedule s = one_f_one_b(2, 1, {.split_backward = true});
  std::swap(s.device_actions[0][1], s.device_actions[0][2]);
  EXPECT_EQ(lines(s), Lines{"device 0 #1 0W0: must run after 0I0 (#2)"});
}

TEST(Validator, RecomputeBetweenForwardAndBackward) {
  Schedule s = hand_made(2, 2, loop_placement(2, 2), {"0R0 0F0 0F1 0B0 0B1 0R1 0R1", "1F0 1B0 1F1 1B1"});
  EXPECT_EQ(lines(s), (Lines{"device 0 #0 0R0: must run after 0F0 (#1)", "device 0 #5 0R1: must run before 0B1 (#4)",
                             "device 0 #6 0R1: duplicate: 0R1 already at #5"}));
}

TEST(Validator, OffloadNeedsOneReloadBetweenItAndTheBackward) {
  Schedule s = hand_made(2, 4, loop_placement(2, 2),
                         {"0OFFLOAD0 0F0 0OFFLOAD1 0F1 0RELOAD2 0F2 0F3 0OFFLOAD3 0R3 0RELOAD3 0B0 0B1 0B2 0B3",
                          "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"});
  EXPECT_EQ(lines(s),
            (Lines{"device 0: missing 0RELOAD0 for 0OFFLOAD0 (#0)", "device 0: missing 0RELOAD1 for 0OFFLOAD1 (#2)",
                   "device 0 #0 0OFFLOAD0: must run after 0F0 (#1)", "device 0 #2 0OFFLOAD1: must run after 0F1 (#3)",
                   "device 0 #4 0RELOAD2: reloads nothing: no 0OFFLOAD2",
                   "device 0 #9 0RELOAD3: must run before 0R3 (#8)"}));

  Schedule late = hand_made(2, 1, loop_placement(2, 2), {"0F0 0OFFLOAD0 0B0 0RELOAD0", "1F0 1B0"});
  EXPECT_EQ(lines(late), Lines{"device 0 #3 0RELOAD0: must run before 0B0 (#2)"});
  Schedule early = hand_made(2, 1, loop_placement(2, 2), {"0F0 0RELOAD0 0OFFLOAD0 0B0", "1F0 1B0"});
  EXPECT_EQ(lines(early), Lines{"device 0 #1 0RELOAD0: must run after 0OFFLOAD0 (#2)"});
}

TEST(Validator, OptimizerOncePerStageAfterEveryBackward) {
  Schedule s = one_f_one_b(2, 3, {.split_backward = true});
  // Device 1 runs 1F0 1I0 1W0 1F1 1I1 1W1 1F2 1I2 1W2: put OPT before the last W.
  s.device_actions[1].insert(s.device_actions[1].begin() + 8, Action::make(K::Opt, 1));
  s.device_actions[0].push_back(Action::make(K::Opt, 0));
  s.device_actions[0].push_back(Action::make(K::Opt, 0));
  EXPECT_EQ(lines(s),
            (Lines{"device 0 #10 0OPT: duplicate: 0OPT already at #9", "device 1 #8 1OPT: must run after 1W2 (#9)"}));
}

// ---- custom kinds --------------------------------------------------------------------------------

TEST(Validator, CustomDependenciesOnTheSameDeviceAreOrderChecks) {
  Schedule s = make_schedule("custom", 2, 2, loop_placement(2, 2));
  s.custom_ops.push_back({.name = "ALLREDUCE",
                          .after = {{.kind = K::B, .all_microbatches = true}},
                          .before = {{.kind = K::Opt}},
                          .per_microbatch = false});
  s.custom_ops.push_back({.name = "QUANT", .after = {{.kind = K::F}}, .before = {{.kind = K::B}}});
  set_rows(s, {"0F0 0F1 0B0 0OPT 0ALLREDUCE 0B1 0QUANT1", "1QUANT0 1F0 1B0 1F1 1QUANT1 1QUANT1 1B1"});
  EXPECT_EQ(lines(s),
            (Lines{"device 0 #3 0OPT: must run after 0B1 (#5)", "device 0 #4 0ALLREDUCE: must run after 0B1 (#5)",
                   "device 0 #4 0ALLREDUCE: must run before 0OPT (#3)", "device 0 #6 0QUANT1: must run before 0B1 (#5)",
                   "device 1 #0 1QUANT0: must run after 1F0 (#1)",
                   "device 1 #5 1QUANT1: duplicate: 1QUANT1 already at #4"}));
}

TEST(Validator, CustomDependencyMustNameAnAddressableKind) {
  Schedule s = one_f_one_b(2, 1);
  s.custom_ops.push_back({.name = "MIXED", .after = {{.kind = K::Overlap}}, .before = {{.kind = K::Custom}}});
  EXPECT_EQ(lines(s), (Lines{"custom kind MIXED: an `after` dependency cannot name OVERLAP_F_B",
                             "custom kind MIXED: a `before` dependency cannot name CUSTOM"}));
}

TEST(Validator, CustomDependencyAcrossDevicesTakesPartInTheDeadlockCheck) {
  // SYNC(0, m) must precede F(1, m), which lives on device 1; device 0 only runs it after its
  // backward, which waits for device 1's.
  Schedule s = make_schedule("custom", 2, 1, loop_placement(2, 2));
  s.custom_ops.push_back({.name = "SYNC", .after = {}, .before = {{.kind = K::F, .stage_offset = 1}}});
  set_rows(s, {"0F0 0B0 0SYNC0", "1F0 1B0"});
  EXPECT_EQ(lines(s), Lines{"deadlock: device 0 #1 0B0 waits for 1B0 (device 1 #1); "
                            "device 1 #0 1F0 waits for 0SYNC0 (device 0 #2)"});
  set_rows(s, {"0F0 0SYNC0 0B0", "1F0 1B0"});
  EXPECT_EQ(lines(s), Lines{});

  // A stage-wide kind waiting for every backward of the next stage.
  Schedule all = make_schedule("custom", 2, 2, loop_placement(2, 2));
  all.custom_ops.push_back({.name = "GATHER",
                            .after = {{.kind = K::B, .stage_offset = 1, .all_microbatches = true}},
                            .before = {},
                            .per_microbatch = false});
  set_rows(all, {"0F0 0GATHER 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"});
  EXPECT_EQ(lines(all), Lines{"deadlock: device 0 #1 0GATHER waits for 1B1 (device 1 #3); "
                              "device 1 #2 1F1 waits for 0F1 (device 0 #2)"});
}

// ---- rule 5: communication -----------------------------------------------------------------------

const Lines kLoweredChain = {"0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"};

TEST(Validator, HandLoweredChainIsValid) {
  EXPECT_EQ(lines(hand_made(2, 1, loop_placement(2, 2), kLoweredChain)), Lines{});
}

TEST(Validator, SendAndReceiveMustBeMatched) {
  Schedule s = hand_made(2, 1, loop_placement(2, 2), {"0F0 0RECV_B0 0B0", "1F0 1B0 1SEND_B0"});
  EXPECT_EQ(lines(s), (Lines{"device 0: missing 0SEND_F0 (stage 1 is on device 1)",
                             "device 1: missing 1RECV_F0 (stage 0 is on device 0)"}));
  Schedule no_recv = hand_made(2, 1, loop_placement(2, 2), {"0F0 0SEND_F0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"});
  EXPECT_EQ(lines(no_recv), Lines{"device 0: missing 0RECV_B0 (stage 1 is on device 1)"});
}

TEST(Validator, SendAfterItsProducerAndReceiveBeforeItsConsumer) {
  Schedule s = hand_made(2, 1, loop_placement(2, 2), {"0SEND_F0 0F0 0B0 0RECV_B0", "1F0 1RECV_F0 1SEND_B0 1B0"});
  EXPECT_EQ(lines(s),
            (Lines{"device 0 #0 0SEND_F0: must run after 0F0 (#1)", "device 0 #3 0RECV_B0: must run before 0B0 (#2)",
                   "device 1 #1 1RECV_F0: must run before 1F0 (#0)", "device 1 #2 1SEND_B0: must run after 1B0 (#3)"}));
}

TEST(Validator, CommunicationOnlyWhereAStageBoundaryCrossesDevices) {
  Schedule s = hand_made(2, 1, loop_placement(2, 2),
                         {"0RECV_F0 0F0 0SEND_F0 0RECV_B0 0B0 0SEND_B0",
                          "1RECV_F0 1F0 1SEND_F0 1RECV_B0 1B0 1SEND_B0 1SEND_B0"});
  EXPECT_EQ(lines(s), (Lines{"device 0 #0 0RECV_F0: misplaced: stage 0 has no previous stage",
                             "device 0 #5 0SEND_B0: misplaced: stage 0 has no previous stage",
                             "device 1 #2 1SEND_F0: misplaced: stage 1 has no next stage",
                             "device 1 #3 1RECV_B0: misplaced: stage 1 has no next stage",
                             "device 1 #6 1SEND_B0: duplicate: 1SEND_B0 already at #5"}));

  // V placement: stages 1 and 2 share device 1, so their hand-off needs no communication.
  Schedule v = hand_made(2, 1, v_placement(2, 4),
                         {"0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0",
                          "1RECV_F0 1F0 1SEND_F0 2RECV_F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0"});
  EXPECT_EQ(lines(v), (Lines{"device 1 #2 1SEND_F0: misplaced: next stage 2 is on this device too",
                             "device 1 #3 2RECV_F0: misplaced: previous stage 1 is on this device too"}));
}

// ---- rule 6: deadlock ----------------------------------------------------------------------------

TEST(Validator, TwoDeviceDeadlock) {
  // Device 0 wants 0B0 before 0F1; device 1 runs 1F1 before 1B0.
  Schedule s = hand_made(2, 2, loop_placement(2, 2), {"0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1"});
  EXPECT_EQ(lines(s), Lines{"deadlock: device 0 #1 0B0 waits for 1B0 (device 1 #2); "
                            "device 1 #1 1F1 waits for 0F1 (device 0 #2)"});
}

TEST(Validator, ThreeDeviceCycle) {
  // Two stages per device; each device first runs a forward whose input comes from the device
  // before it, and only then the forward that device needs.
  Schedule s = hand_made(3, 1, loop_placement(3, 6), {"3F0 0F0 3B0 0B0", "1F0 4F0 4B0 1B0", "2F0 5F0 5B0 2B0"});
  EXPECT_EQ(lines(s), Lines{"deadlock: device 0 #0 3F0 waits for 2F0 (device 2 #0); "
                            "device 2 #0 2F0 waits for 1F0 (device 1 #0); "
                            "device 1 #0 1F0 waits for 0F0 (device 0 #1)"});
}

TEST(Validator, DeadlockReportsTheCycleOnlyNotTheChainLeadingToIt) {
  // Device 0 waits on device 1, which is in a cycle with device 2.
  Schedule s = hand_made(3, 2, loop_placement(3, 3), {"0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1", "2F0 2F1 2B0 2B1"});
  EXPECT_EQ(lines(s), Lines{"deadlock: device 1 #1 1B0 waits for 2B0 (device 2 #2); "
                            "device 2 #1 2F1 waits for 1F1 (device 1 #2)"});
}

TEST(Validator, DeadlockIsCheckedOnlyWhenEverythingElseHolds) {
  Schedule s = hand_made(2, 2, loop_placement(2, 2), {"0F0 0B0 0F1 0B1", "1F0 1F1 1B0"});
  EXPECT_EQ(lines(s), Lines{"device 1: missing 1B1 (or 1I1 and 1W1)"});
}

// ---- with lowering -------------------------------------------------------------------------------

TEST(Validator, LoweringKeepsAValidScheduleValid) {
  for (int p = 2; p <= 4; ++p) {
    EXPECT_EQ(lines(lower(one_f_one_b(p, 2 * p, {.split_backward = true, .optimizer = true}))), Lines{}) << p;
  }
  Schedule v =
      hand_made(2, 2, v_placement(2, 4), {"0F0 0F1 3F0 3B0 3F1 3B1 0B0 0B1", "1F0 2F0 1F1 2F1 2B0 1B0 2B1 1B1"});
  EXPECT_EQ(lines(lower(v)), Lines{});
  Schedule overlap = hand_made(2, 2, loop_placement(2, 2), {"0F0 0F1 0B0 0B1", "1F0 (1F1;1B0)OVERLAP_F_B 1B1"});
  EXPECT_EQ(lines(lower(overlap)), Lines{});
}

TEST(Validator, SendMovedBehindABlockingActionDeadlocks) {
  // Device 1 runs both forwards before its backwards, so device 0's 0B0 waits until 1F1 has run.
  Schedule s = lower(hand_made(2, 2, loop_placement(2, 2), {"0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1"}));
  ASSERT_EQ(lines(s), Lines{});
  move_after(s, 0, "0SEND_F1", "0B0");
  std::string expected = "deadlock: device 0 #" + std::to_string(find_position(s, 0, "0B0")) +
                         " 0B0 waits for 1SEND_B0 (device 1 #" + std::to_string(find_position(s, 1, "1SEND_B0")) +
                         "); device 1 #" + std::to_string(find_position(s, 1, "1F1")) +
                         " 1F1 waits for 0SEND_F1 (device 0 #" + std::to_string(find_position(s, 0, "0SEND_F1")) + ")";
  EXPECT_EQ(lines(s), Lines{expected});
}

TEST(Validator, CheckValidThrowsEveryLine) {
  EXPECT_NO_THROW(check_valid(one_f_one_b(3, 6)));
  Schedule s = hand_made(2, 1, loop_placement(2, 2), {"0F0 1F0 0B0", "1B0"});
  try {
    check_valid(s);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "device 0 #1 1F0: wrong placement: stage 1 is on device 1\ndevice 1: missing 1F0");
  }
}

}  // namespace
}  // namespace flexpipe
