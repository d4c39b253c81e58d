// Round trip IR -> program -> IR: write_program gives a program that compiles back to an equal
// schedule, in both styles, for every built-in (compute-only and lowered) and for PyTorch's CSV
// fixtures; the compact style's text on hand-checked cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "flexpipe/interop/pytorch_csv.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/lang/writer.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

void expect_round_trip(const Schedule& schedule, const std::string& where) {
  for (ProgramStyle style : {ProgramStyle::Compact, ProgramStyle::Explicit}) {
    const std::string text = write_program(schedule, style);
    const CompiledProgram back = compile_program(text, "written.fps");
    EXPECT_EQ(back.schedule, schedule) << where << "\n" << text;
  }
}

int count_lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

TEST(RoundTrip, EveryBuiltinComputeOnlyAndLowered) {
  for (const BuiltinSchedule& builtin : builtin_schedules()) {
    for (int p : {2, 4}) {
      const Schedule s = make_builtin(builtin.name, {p, 2 * p, 0});
      expect_round_trip(s, builtin.name);
      expect_round_trip(lower(s), builtin.name + " lowered");
    }
  }
}

// 1F1B at p = 4, m = 8 by hand: device d runs min(m, p - d - 1) warm-up forwards, then forward and
// backward in turn, then the rest of the backwards; runs of equal actions become `repeat`.
TEST(RoundTrip, CompactStyleWritesRunsAndNextMicrobatchForms) {
  const std::string text = write_program(make_builtin("1f1b", {4, 8, 0}));
  EXPECT_NE(text.find("on 0 {\n  repeat 4 { F(0) }\n  repeat 4 { B(0)  F(0) }\n  repeat 4 { B(0) }\n}\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("on 2 {\n  F(2)\n  repeat 7 { F(2)  B(2) }\n  B(2)\n}\n"), std::string::npos) << text;
  EXPECT_NE(text.find("on 3 {\n  repeat 8 { F(3)  B(3) }\n}\n"), std::string::npos) << text;
  // The explicit style names every micro-batch.
  const std::string explicit_text = write_program(make_builtin("1f1b", {4, 8, 0}), ProgramStyle::Explicit);
  EXPECT_NE(explicit_text.find("on 3 {\n  F(3, 0)  B(3, 0)  F(3, 1)"), std::string::npos) << explicit_text;
  // A steady state of any length is a few lines: 1F1B on 8 devices with 64 micro-batches is at most
  // three runs per device.
  const std::string large = write_program(make_builtin("1f1b", {8, 64, 0}));
  EXPECT_LE(count_lines(large), 6 + 8 * 5) << large;
}

// Where a stage's counter does not name the action's micro-batch (out of order, or after another
// pipeline's), the action is written with its micro-batch, and the counter follows it as the
// interpreter's does.
TEST(RoundTrip, CompactStyleNamesOutOfOrderMicrobatches) {
  Schedule s = make_schedule("swapped", 1, 4, {0});
  s.device_actions[0] = {Action::make(ActionKind::F, 0, 1),     Action::make(ActionKind::F, 0, 0),
                         Action::make(ActionKind::F, 0, 1 + 1), Action::make(ActionKind::F, 0, 3),
                         Action::make(ActionKind::B, 0, 0),     Action::make(ActionKind::B, 0, 1),
                         Action::make(ActionKind::B, 0, 3),     Action::make(ActionKind::B, 0, 2)};
  expect_round_trip(s, "swapped");
  const std::string text = write_program(s);
  EXPECT_NE(text.find("F(0, 1)  F(0, 0)  F(0, 2)  F(0)  B(0)  B(0)  B(0, 3)  B(0, 2)"), std::string::npos) << text;
}

TEST(RoundTrip, PyTorchCsvFixtures) {
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(FLEXPIPE_TEST_DATA "/pytorch")) {
    if (entry.path().extension() != ".csv") continue;
    expect_round_trip(load_pytorch_csv(entry.path().string()), entry.path().string());
    ++files;
  }
  EXPECT_GE(files, 5);
}

TEST(RoundTrip, CustomKindsPlacementListsAndRoutes) {
  Schedule s = make_schedule("odd \"one\"", 2, 2, {1, 0, 0, 1}, 2);
  s.microbatch_pipeline = {1, 0};
  CustomOpKind op;
  op.name = "OFFLOAD_KV";
  op.after = {{ActionKind::F, 0, false}};
  op.before = {{ActionKind::I, 1, false}, {ActionKind::B, -2, true}};
  op.duration = 1e-05;
  op.memory = -123456789.25;
  op.communicates = true;
  s.custom_ops.push_back(op);
  op.name = "SYNC";
  op.per_microbatch = false;
  s.custom_ops.push_back(op);
  s.device_actions[1] = {Action::make(ActionKind::F, 0, 1), Action::custom_op(0, 0, 1), Action::custom_op(1, 0, -1),
                         Action::custom_op(1, 0, -1), Action::overlap(0, 1, 0, 1, ActionKind::I)};
  s.device_actions[0] = {Action::make(ActionKind::Opt, 1)};
  expect_round_trip(s, "custom");
  const std::string text = write_program(s);
  EXPECT_NE(text.find("stages 4 placed [1, 0, 0, 1]\npipelines 2 route [1, 0]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  before B(s - 2, all)\n"), std::string::npos) << text;
}

TEST(RoundTrip, RefusesWhatTheLanguageCannotState) {
  Schedule s = make_schedule("x", 1, 1, {0});
  s.device_actions[0] = {Action::make(ActionKind::F, 0, -1)};
  EXPECT_THROW(write_program(s), Error);
}

}  // namespace
}  // namespace flexpipe
