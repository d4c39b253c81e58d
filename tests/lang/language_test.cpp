// Semantics of the schedule language on small programs whose schedules are worked out by hand:
// expressions, loops, patterns, the next-micro-batch forms, placements, pipelines, padding, new
// operation kinds, overlapped actions, the greedy policy, source maps and traces.
#include <gtest/gtest.h>

#include "flexpipe/lang/program.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe {
namespace {

const std::string kHeader = "devices 2\nmicrobatches 4\nstages 2\n";

std::vector<std::string> cells(const Schedule& s, int device) {
  std::vector<std::string> out;
  for (const Action& a : s.device_actions[device]) out.push_back(s.action_name(a));
  return out;
}

using Cells = std::vector<std::string>;

TEST(Language, ExpressionsFloorDivisionAndShortCircuit) {
  const CompiledProgram p =
      compile_program(kHeader +
                          "F(0, 7 / 2)\n"           // 3
                          "F(0, (0 - 7) % 3)\n"     // floor remainder: 2
                          "F(0, -(0 - 7) / 7)\n"    // 1
                          "F(0, 0 - 7 / -2 - 4)\n"  // -7/-2 = 3 -> 0 - (-4) - 4 = 0
                          "if 0 and 1 / 0 { F(1, 0) }\n"
                          "if 1 or 1 / 0 { F(1, max(0, 1, 3) - min(3, 2)) }\n"
                          "F(1, abs(0 - 2) == 2 ? 3 : 0)\n"
                          "F(1, (not 0) + (2 >= 2) + (1 != 1) + (not 5 - 5 - 1))\n",  // not binds looser than -
                      "x.fps");
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F3", "0F2", "0F1", "0F0"}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"1F1", "1F3", "1F2"}));
}

TEST(Language, NextFormsCountAndSharedBackwardCounter) {
  const CompiledProgram p = compile_program(kHeader +
                                                "F(0)  F(0)  F(0, 3)\n"    // next after 3 is exhausted
                                                "I(0)  B(0)\n"             // one backward counter: I0 then B1
                                                "W(0)\n"                   // W's own counter: W0
                                                "F(1, count(F, 0))\n"      // 3 forwards of stage 0 so far
                                                "F(1, count(B, 0) - 2)\n"  // I and B count together: 2
                                                "OPT(1)\n",
                                            "x.fps");
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F0", "0F1", "0F3", "0I0", "0B1", "0W0"}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"1F3", "1F0", "1OPT"}));
}

// Arrays: made with array(n[, v]), read and set by element, copied whole (a copy, not an alias),
// made again by assignment; patterns reach them through their lexical scope.
TEST(Language, ArraysAreMadeReadSetAndCopiedWhole) {
  const CompiledProgram p = compile_program(kHeader +
                                                "let a = array(3)\n"     // 0 0 0
                                                "let b = array(2, 5)\n"  // 5 5
                                                "a[1] = b[0] - 2\n"      // 0 3 0
                                                "a[2] += a[1] * 2\n"     // 0 3 6
                                                "let c = a\n"            // a copy
                                                "c[0] = 1\n"             // c: 1 3 6, a unchanged
                                                "pattern bump(i) { a[i] -= 1 }\n"
                                                "bump(1)\n"                               // a: 0 2 6
                                                "for i in 0..3 { F(0, min(a[i], 3)) }\n"  // F0 F2 F3
                                                "F(1, c[0])  F(1, c[1])\n"                // F1 F3
                                                "a = array(1, 2)\n"
                                                "F(1, a[0])\n"  // F2
                                                "b = c\n"
                                                "F(1, b[2] - 6)\n",  // F0
                                            "x.fps");
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F0", "0F2", "0F3"}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"1F1", "1F3", "1F2", "1F0"}));
}

TEST(Language, LoopsRepeatWhileAndReversed) {
  const CompiledProgram p =
      compile_program(kHeader +
                          "for i in 1..3 reversed { F(0, i) }\n"  // 2, 1
                          "repeat 0 - 1 { F(0, 0) }\n"            // none
                          "let k = 0\n"
                          "while k < 4 { if k % 2 == 0 { F(1, k) } else if k == 1 { B(1, 0) } else { k += 0 }\n"
                          "  k += 1 }\n"
                          "for i in 3..3 { F(0, 3) }\n",
                      "x.fps");
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F2", "0F1"}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"1F0", "1B0", "1F2"}));
}

TEST(Language, PatternsSeeTheirDefinitionScope) {
  const CompiledProgram p = compile_program("param p = 2\n" + kHeader +
                                                "let base = 1\n"
                                                "pattern pair(s, mb) { F(s, mb + base)  B(s, mb + base) }\n"
                                                "for d in 0..p { pair(d, d) }\n",
                                            "x.fps");
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F1", "0B1"}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"1F2", "1B2"}));
}

TEST(Language, PlacementsPipelinesAndName) {
  CompiledProgram p = compile_program("devices 3\nmicrobatches 2\nstages 6 placed vshape\n", "dir/my-v.fps");
  EXPECT_EQ(p.schedule.stage_device, (std::vector<int32_t>{0, 1, 2, 2, 1, 0}));
  EXPECT_EQ(p.schedule.name, "my-v");
  EXPECT_TRUE(p.schedule.microbatch_pipeline.empty());
  p = compile_program("name \"odd\"\ndevices 3\nmicrobatches 2\nstages 4 placed (s * 2) % 3\n", "x.fps");
  EXPECT_EQ(p.schedule.stage_device, (std::vector<int32_t>{0, 2, 1, 0}));
  EXPECT_EQ(p.schedule.name, "odd");
  p = compile_program(
      "devices 2\nmicrobatches 4\nstages 4 placed [0, 1, 1, 0]\npipelines 2 route mb % 2\n"
      "F(2)\nF(2)\n",
      "x.fps");
  EXPECT_EQ(p.schedule.num_pipelines, 2);
  EXPECT_EQ(p.schedule.stages_per_pipeline, 2);
  EXPECT_EQ(p.schedule.microbatch_pipeline, (std::vector<int32_t>{0, 1, 0, 1}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"2F1", "2F3"}));  // the next form walks stage 2's pipeline only
}

// A description is what a catalog lists; it may stand before the parameters and changes nothing
// in the schedule.
TEST(Language, DescriptionIsKeptBesideTheSchedule) {
  const std::string body = "param p = 2\ndevices p\nmicrobatches 1\nstages p\nF(0)\n";
  const CompiledProgram described = compile_program("description \"one forward\"\n" + body, "x.fps");
  EXPECT_EQ(described.description, "one forward");
  const CompiledProgram plain = compile_program("\n" + body, "x.fps");
  EXPECT_EQ(plain.description, "");
  EXPECT_EQ(described.schedule, plain.schedule);
}

TEST(Language, PaddingDropsMicrobatchesPastM) {
  const CompiledProgram p =
      compile_program("devices 1\nmicrobatches 2 padded to 4\nstages 1\nrepeat 4 { F(0) }\nrepeat 4 { B(0) }\n",
                      "x.fps");
  EXPECT_EQ(p.schedule.num_microbatches, 2);
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F0", "0F1", "0B0", "0B1"}));
  EXPECT_TRUE(validate(p.schedule).empty());
}

TEST(Language, OperationKindsBecomeCustomOps) {
  const CompiledProgram p = compile_program("param kb = 4\n" + kHeader +
                                                "op OFFLOAD_KV {\n  after F\n  before I(s + 1), B(s - 1, all)\n"
                                                "  duration 0.5\n  memory -kb * 1024\n  communicates\n}\n"
                                                "op SYNC { after W(s, all)\n stagewide }\n"
                                                "F(0, 0)  OFFLOAD_KV(0)  OFFLOAD_KV(0, 1)  SYNC(0)\n",
                                            "x.fps");
  ASSERT_EQ(p.schedule.custom_ops.size(), 2u);
  const CustomOpKind& kv = p.schedule.custom_ops[0];
  EXPECT_EQ(kv.name, "OFFLOAD_KV");
  EXPECT_EQ(kv.after, (std::vector<CustomDependency>{{ActionKind::F, 0, false}}));
  EXPECT_EQ(kv.before, (std::vector<CustomDependency>{{ActionKind::I, 1, false}, {ActionKind::B, -1, true}}));
  EXPECT_EQ(kv.duration, 0.5);
  EXPECT_EQ(kv.memory, -4096);
  EXPECT_TRUE(kv.communicates);
  EXPECT_TRUE(kv.per_microbatch);
  const CustomOpKind& sync = p.schedule.custom_ops[1];
  EXPECT_FALSE(sync.per_microbatch);
  EXPECT_EQ(sync.after, (std::vector<CustomDependency>{{ActionKind::W, 0, true}}));
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F0", "0OFFLOAD_KV0", "0OFFLOAD_KV1", "0SYNC"}));
  EXPECT_EQ(p.schedule.device_actions[0][3], Action::custom_op(1, 0, -1));
}

TEST(Language, OverlapAndOldestPendingWeight) {
  const CompiledProgram p = compile_program(
      "devices 1\nmicrobatches 2\nstages 2\n"
      "F(0)  F(1)  I(1)  F(0) & I(0)  on 0 { W()  F(1) & B(1)  W() }  B(0)\n",
      "x.fps");
  EXPECT_EQ(cells(p.schedule, 0),
            (Cells{"0F0", "1F0", "1I0", "(0F1;0I0)OVERLAP_F_B", "1W0", "(1F1;1B1)OVERLAP_F_B", "0W0", "0B1"}));
}

TEST(Language, SourceMapAndLocatedValidatorDiagnostics) {
  const std::string text = kHeader + "for d in 0..2 {\n  B(d, 0)\n  F(d, 0)\n}\n";
  const CompiledProgram p = compile_program(text, "bad-order.fps", {}, {.max_steps = 1000, .trace = true});
  EXPECT_EQ(p.map.at(1, 0), (SourceLocation{5, 3}));
  EXPECT_EQ(p.map.at(1, 1), (SourceLocation{6, 3}));
  EXPECT_EQ(p.map.at(1, 2), (SourceLocation{}));
  EXPECT_EQ(p.trace.front(), "bad-order.fps:5:3: 0B0 -> device 0 #0");
  const std::vector<Diagnostic> diagnostics = validate(p.schedule);
  ASSERT_FALSE(diagnostics.empty());
  const std::vector<std::string> located = locate_diagnostics(p, diagnostics);
  ASSERT_EQ(located.size(), diagnostics.size());
  for (size_t i = 0; i < located.size(); ++i) {
    if (diagnostics[i].position < 0) continue;
    const SourceLocation at = p.map.at(diagnostics[i].device, diagnostics[i].position);
    const std::string line = at.line == 5 ? "  B(d, 0)" : "  F(d, 0)";
    EXPECT_EQ(located[i], "bad-order.fps:" + std::to_string(at.line) + ":3: error: " + diagnostics[i].to_string() +
                              "\n" + "    " + std::to_string(at.line) + " | " + line + "\n      |   ^");
  }
  // A diagnostic without a position keeps its text, named by the file.
  EXPECT_EQ(locate_diagnostics(p, {Diagnostic{-1, -1, "", "stage 1 micro-batch 3: missing F"}}).front(),
            "bad-order.fps: error: stage 1 micro-batch 3: missing F");
}

TEST(Language, StepLimitStopsRunawayPrograms) {
  try {
    compile_program(kHeader + "let k = 0\nwhile k >= 0 {\n  k += 1\n}\n", "spin.fps", {}, {.max_steps = 500});
    FAIL() << "a runaway program compiled";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).substr(0, 70),
              "spin.fps:6:3: error: step limit of 500 reached: the program runs away\n");
  }
}

// The greedy policy "backwards first, at most p-d micro-batches in flight" with B twice as long as
// F is 1F1B: it reproduces the generator's lists.
TEST(Language, GreedyOneFOneBEqualsGenerator) {
  const std::string text =
      "param p = 4\nparam m = 8\ndevices p\nmicrobatches m\nstages p\n"
      "greedy {\n  prefer B, F\n  time F 1, B 2\n  inflight p - d\n}\n";
  for (int p : {2, 3, 4})
    for (int m = p; m <= 3 * p; ++m)
      EXPECT_EQ(compile_program(text, "g.fps", {{"p", p}, {"m", m}}).schedule.device_actions,
                make_builtin("1f1b", {p, m, 1}).device_actions)
          << p << " " << m;
}

// "Fill bubbles with W": input gradients first, W only when nothing else is ready. With unit times
// and p=2, m=2 the lists are worked out by hand: device 1 runs F0 I0 F1 I1 and its W's fill the
// wait for device 0's input gradients.
TEST(Language, GreedyFillBubblesWithW) {
  const CompiledProgram p = compile_program(
      "devices 2\nmicrobatches 2\nstages 2\n"
      "greedy {\n  prefer I, F, W\n  inflight 2\n}\n",
      "g.fps");
  // t0 0F0 | t1 0F1, 1F0 | t2 1I0 (0 idle: I0 needs 1I0) | t3 0I0, 1F1 | t4 0W0, 1I1 | t5 0I1, 1W0 | t6 0W1, 1W1
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F0", "0F1", "0I0", "0W0", "0I1", "0W1"}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"1F0", "1I0", "1F1", "1I1", "1W0", "1W1"}));
  EXPECT_TRUE(validate(p.schedule).empty());
  for (const auto& positions : p.map.device_positions)
    for (const SourceLocation& at : positions) EXPECT_EQ(at, (SourceLocation{4, 1}));
}

// `prefer written`: the program's lists are the priority and the scheduler runs each action as
// soon as it is ready. Device 0 writes its I0 and W0 first; they wait for device 1's input
// gradient while the forwards written after them run. Unit times, worked out by hand:
// t0 0F0 | t1 0F1, 1F0 | t2 1I0 | t3 0I0, 1F1 | t4 0W0, 1I1 | t5 0I1, 1W0 | t6 0W1, 1W1
TEST(Language, GreedyWrittenRunsTheWrittenOrderWhenReady) {
  const CompiledProgram p = compile_program(
      "devices 2\nmicrobatches 2\nstages 2\ngreedy { prefer written }\n"
      "on 0 { I(0, 0)  W(0, 0) }\n"
      "on 0 { F(0, 0)  F(0, 1)  I(0, 1)  W(0, 1) }\n"
      "on 1 { F(1, 0)  I(1, 0)  F(1, 1)  I(1, 1)  W() W() }\n",
      "g.fps");
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F0", "0F1", "0I0", "0W0", "0I1", "0W1"}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"1F0", "1I0", "1F1", "1I1", "1W0", "1W1"}));
  EXPECT_TRUE(validate(p.schedule).empty());
  // The source map follows the actions to their new places: 0I0 was written on line 5, 0F0 on line 6.
  EXPECT_EQ(p.map.at(0, 0), (SourceLocation{6, 8}));
  EXPECT_EQ(p.map.at(0, 2), (SourceLocation{5, 8}));
  EXPECT_EQ(p.map.at(1, 4), (SourceLocation{7, 44}));  // the first W() took 1I0
}

// With `prefer written` the in-flight limit holds for the written order too: a forward runs ahead
// of what is written before it only if the count stays within the limit there. Device 1 writes
// 1F1 I1 W1 F0 I0 W0. At t1 only 1F0 is ready and nothing is in flight, but running it would make
// two in flight once 1F1 runs: with limit 1 it waits behind 1W1, with limit 2 it goes first.
//   limit 1: t0 0F0 | t1 0F1 | t2 1F1 | t3 1I1 | t4 0I1, 1W1 | t5 0W1, 1F0 | t6 1I0 | t7 0I0, 1W0 | t8 0W0
//   limit 2: t0 0F0 | t1 0F1, 1F0 | t2 1F1 | t3 1I1 | t4 0I1, 1W1 | t5 0W1, 1I0 | t6 0I0, 1W0 | t7 0W0
TEST(Language, GreedyWrittenKeepsTheLimitAlongTheWrittenOrder) {
  const std::string text =
      "param limit = 1\ndevices 2\nmicrobatches 2\nstages 2\ngreedy {\n  prefer written\n  inflight d == 0 ? 2 : limit\n}\n"
      "F(0, 0)  F(0, 1)  I(0, 0)  W(0, 0)  I(0, 1)  W(0, 1)\n"
      "F(1, 1)  I(1, 1)  W(1, 1)  F(1, 0)  I(1, 0)  W(1, 0)\n";
  const CompiledProgram one = compile_program(text, "g.fps");
  EXPECT_EQ(cells(one.schedule, 0), (Cells{"0F0", "0F1", "0I1", "0W1", "0I0", "0W0"}));
  EXPECT_EQ(cells(one.schedule, 1), (Cells{"1F1", "1I1", "1W1", "1F0", "1I0", "1W0"}));
  const CompiledProgram two = compile_program(text, "g.fps", {{"limit", 2}});
  EXPECT_EQ(cells(two.schedule, 0), (Cells{"0F0", "0F1", "0I1", "0W1", "0I0", "0W0"}));
  EXPECT_EQ(cells(two.schedule, 1), (Cells{"1F0", "1F1", "1I1", "1W1", "1I0", "1W0"}));
  EXPECT_TRUE(validate(one.schedule).empty());
  EXPECT_TRUE(validate(two.schedule).empty());
}

// `cooldown I, W`: once a device has started its last F, a ready I goes before a ready W written
// earlier. Both devices write F0 F1 I0 W0 I1 W1; device 1 starts its last F at t2, device 0 at t1.
//   without: t0 0F0 | t1 0F1, 1F0 | t2 1F1 | t3 1I0 | t4 0I0, 1W0 | t5 0W0, 1I1 | t6 0I1, 1W1 | t7 0W1
//   with:    t0 0F0 | t1 0F1, 1F0 | t2 1F1 | t3 1I0 | t4 0I0, 1I1 | t5 0I1, 1W0 | t6 0W0, 1W1 | t7 0W1
TEST(Language, GreedyCooldownPutsInputGradientsFirst) {
  const std::string lists = "for d in 0..2 { F(d, 0)  F(d, 1)  I(d, 0)  W(d, 0)  I(d, 1)  W(d, 1) }\n";
  const std::string header = "devices 2\nmicrobatches 2\nstages 2\n";
  const CompiledProgram without = compile_program(header + "greedy { prefer written }\n" + lists, "g.fps");
  const CompiledProgram with = compile_program(header + "greedy { prefer written\n cooldown I, W }\n" + lists, "g.fps");
  for (int d = 0; d < 2; ++d) {
    EXPECT_EQ(cells(without.schedule, d),
              (Cells{std::to_string(d) + "F0", std::to_string(d) + "F1", std::to_string(d) + "I0",
                     std::to_string(d) + "W0", std::to_string(d) + "I1", std::to_string(d) + "W1"}));
    EXPECT_EQ(cells(with.schedule, d),
              (Cells{std::to_string(d) + "F0", std::to_string(d) + "F1", std::to_string(d) + "I0",
                     std::to_string(d) + "I1", std::to_string(d) + "W0", std::to_string(d) + "W1"}));
  }
}

// `cooldown` is orthogonal to how the priority is given: with `prefer I, F, W` (the case of
// GreedyFillBubblesWithW), `cooldown W, I` lets device 1, whose last F starts at t3, run its W0
// before I1. t0 0F0 | t1 0F1, 1F0 | t2 1I0 | t3 0I0, 1F1 | t4 0W0, 1W0 | t5 1I1 | t6 0I1, 1W1 | t7 0W1
TEST(Language, GreedyCooldownWithKindPreference) {
  const CompiledProgram p = compile_program(
      "devices 2\nmicrobatches 2\nstages 2\n"
      "greedy {\n  prefer I, F, W\n  inflight 2\n  cooldown W, I\n}\n",
      "g.fps");
  EXPECT_EQ(cells(p.schedule, 0), (Cells{"0F0", "0F1", "0I0", "0W0", "0I1", "0W1"}));
  EXPECT_EQ(cells(p.schedule, 1), (Cells{"1F0", "1I0", "1F1", "1W0", "1I1", "1W1"}));
  EXPECT_TRUE(validate(p.schedule).empty());
}

TEST(Language, LoadProgramNamesAnUnreadableFile) {
  try {
    load_program("/nonexistent/x.fps");
    FAIL() << "loaded a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/nonexistent/x.fps: cannot read: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace flexpipe
