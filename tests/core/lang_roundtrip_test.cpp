// Round trip IR -> program -> IR: write_program gives a program that compiles back to an equal
// schedule, for every built-in (compute-only and lowered) and for PyTorch's CSV fixtures.
#include <gtest/gtest.h>

#include <filesystem>

#include "flexpipe/core/builtin_schedules.h"
#include "flexpipe/core/error.h"
#include "flexpipe/core/lowering.h"
#include "flexpipe/core/pytorch_csv.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/lang/writer.h"

namespace flexpipe {
namespace {

void expect_round_trip(const Schedule& schedule, const std::string& where) {
  const std::string text = write_program(schedule);
  const CompiledProgram back = compile_program(text, "written.fps");
  EXPECT_EQ(back.schedule, schedule) << where << "\n" << text;
}

TEST(RoundTrip, EveryBuiltinComputeOnlyAndLowered) {
  for (const BuiltinSchedule& builtin : builtin_schedules()) {
    for (int p : {2, 4}) {
      const Schedule s = make_builtin(builtin.name, {p, 2 * p, 0});
      expect_round_trip(s, builtin.name);
      expect_round_trip(lower(s), builtin.name + " lowered");
    }
  }
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
