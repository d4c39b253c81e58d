// Drives the real flexpipe binary: exit codes, messages and the files it writes.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_harness.h"

namespace {

namespace fs = std::filesystem;
using flexpipe::test::Outcome;
using flexpipe::test::slurp;

class Cli : public flexpipe::test::CliHarness {
 protected:
  Cli() : CliHarness("flexpipe_cli_") {}
};

TEST_F(Cli, SchedulesListsTheWholeLibrary) {
  Outcome run = flexpipe("schedules --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> names;
  for (const auto& entry : nlohmann::json::parse(run.out)) names.push_back(entry["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2",
                                             "zb-v", "zb-v-adaptive", "v-half", "v-min", "dualpipev", "dualpipe"}));
}

TEST_F(Cli, Simulate1F1BReportsThePublishedBubble) {
  // p = 4, m = 8, F = I = W = 1: makespan (m + p - 1)(F + B) = 11 * 3, idle (p - 1)(F + B) = 9 per device.
  Outcome run = flexpipe("simulate 1f1b -p 4 -m 8 --uniform-costs 1,1,1 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto report = nlohmann::json::parse(run.out);
  EXPECT_DOUBLE_EQ(report["makespan"].get<double>(), 33.0);
  EXPECT_DOUBLE_EQ(report["bubble_ratio"].get<double>(), 9.0 / 33.0);
  EXPECT_DOUBLE_EQ(report["lower_bound"].get<double>(), 24.0);
  EXPECT_DOUBLE_EQ(report["efficiency"].get<double>(), 24.0 / 33.0);
  ASSERT_EQ(report["devices"].size(), 4u);
  for (int r = 0; r < 4; ++r) {
    EXPECT_DOUBLE_EQ(report["devices"][r]["busy"].get<double>(), 24.0);
    EXPECT_DOUBLE_EQ(report["devices"][r]["idle"].get<double>(), 9.0);
    EXPECT_DOUBLE_EQ(report["devices"][r]["peak_memory"].get<double>(), 4.0 - r);
  }
}

TEST_F(Cli, Simulate1F1BWithFewerMicroBatchesThanDevices) {
  // p = 4, m = 2: the warm-up is bounded by m. Makespan (m + p - 1)(F + B) = 5 * 3, device r holds
  // min(m, p - r) micro-batches.
  Outcome run = flexpipe("simulate 1f1b -p 4 -m 2 --uniform-costs 1,1,1 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto report = nlohmann::json::parse(run.out);
  EXPECT_DOUBLE_EQ(report["makespan"].get<double>(), 15.0);
  ASSERT_EQ(report["devices"].size(), 4u);
  for (int r = 0; r < 4; ++r)
    EXPECT_DOUBLE_EQ(report["devices"][r]["peak_memory"].get<double>(), std::min(2.0, 4.0 - r));
}

TEST_F(Cli, SimulateTakesTwoLevelsOfDevices) {
  // One micro-batch through 4 devices, F = I = W = 1 (B = 2): 4 F and 4 B in a row, 12, plus a
  // transfer at each of the 3 boundaries both ways. Within a node a transfer takes COMM = 1; with 2
  // devices per node, the one between devices 1 and 2 takes the inter-node 5: 12 + 2 * (1 + 5 + 1).
  auto makespan = [&](const std::string& topology) {
    const Outcome run = flexpipe("simulate 1f1b -p 4 -m 1 --uniform-costs 1,1,1,1 --json " + topology);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return run.exit_code == 0 ? nlohmann::json::parse(run.out)["makespan"].get<double>() : -1.0;
  };
  EXPECT_DOUBLE_EQ(makespan(""), 18.0);
  EXPECT_DOUBLE_EQ(makespan("--devices-per-node 4 --inter-node-link 5"), 18.0);  // one node
  EXPECT_DOUBLE_EQ(makespan("--devices-per-node 2 --inter-node-link 5"), 26.0);
  EXPECT_DOUBLE_EQ(makespan("--devices-per-node 1 --inter-node-link 5,1e9"), 12.0 + 6 * 5);
  const Outcome bad = flexpipe("simulate 1f1b --devices-per-node 2 --inter-node-link 5,0");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "error: --inter-node-link '5,0': expected LATENCY[,BANDWIDTH], a latency of at least 0 and a positive "
            "bandwidth\n");
}

TEST_F(Cli, SimulateWritesSvgAndTrace) {
  const fs::path svg = dir_ / "t.svg", trace = dir_ / "t.json";
  Outcome run = flexpipe("simulate zb-h1 -p 4 -m 8 --svg " + svg.string() + " --trace " + trace.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("SVG timeline: " + svg.string()), std::string::npos) << run.out;
  EXPECT_EQ(slurp(svg).rfind("<svg", 0) == 0 || slurp(svg).rfind("<?xml", 0) == 0, true);
  const auto events = nlohmann::json::parse(slurp(trace))["traceEvents"];
  EXPECT_GT(events.size(), 4u * 8u * 3u);
}

TEST_F(Cli, UnknownScheduleIsExitCode2WithTheKnownNames) {
  Outcome run = flexpipe("simulate nope");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("error: unknown schedule 'nope' (built-in schedules: gpipe, 1f1b,"), std::string::npos)
      << run.err;
}

TEST_F(Cli, ImpossibleParametersAreExitCode2) {
  Outcome run = flexpipe("simulate interleaved-1f1b -p 4 -m 6");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("error: interleaved-1f1b with p=4, m=6, v=2: needs m to be a multiple of p"),
            std::string::npos)
      << run.err;
  Outcome negative = flexpipe("simulate 1f1b -p -3");
  EXPECT_EQ(negative.exit_code, 2);
  Outcome bad_costs = flexpipe("simulate 1f1b --uniform-costs 1,x,1");
  EXPECT_EQ(bad_costs.exit_code, 2);
  EXPECT_NE(bad_costs.err.find("--uniform-costs"), std::string::npos) << bad_costs.err;
}

TEST_F(Cli, MalformedCsvNamesFileLineAndColumn) {
  const fs::path csv = write("bad.csv", "0F0,0F1\n1F0,1BX0\n");
  Outcome run = flexpipe("check " + csv.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find(csv.string() + ":2:5: "), std::string::npos) << run.err;
}

TEST_F(Cli, MalformedCostJsonNamesFileLineAndColumn) {
  const fs::path costs = write("costs.json", "{\n  \"format\": \"flexpipe-costs\",\n  \"version\": 1,\n  oops\n}\n");
  Outcome run = flexpipe("simulate 1f1b --costs " + costs.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find(costs.string() + ":4:"), std::string::npos) << run.err;
}

TEST_F(Cli, CheckReportsEveryErrorAndExits1) {
  // Two ranks, stage 1 never runs its backward, and stage 0's forward of micro-batch 1 is missing.
  const fs::path csv = write("broken.csv", "0F0,0B0\n1F0,1F1\n");
  Outcome run = flexpipe("check " + csv.string());
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.out.find("errors"), std::string::npos) << run.out;
  Outcome json = flexpipe("check --json " + csv.string());
  EXPECT_EQ(json.exit_code, 1);
  const auto report = nlohmann::json::parse(json.out);
  EXPECT_FALSE(report["valid"].get<bool>());
  EXPECT_GE(report["errors"].size(), 3u);
}

TEST_F(Cli, CheckFindsADeadlockWithoutHanging) {
  // Rank 0 waits in 0B0 for 1B0, which rank 1 runs only after 1F1, which needs 0F1 after 0B0.
  const fs::path csv = write("deadlock.csv", "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  Outcome run = flexpipe("check " + csv.string());
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.out.find("deadlock"), std::string::npos) << run.out;
}

TEST_F(Cli, ConvertRoundTripsCsvThroughJson) {
  const fs::path csv = dir_ / "zb.csv", json = dir_ / "zb.json", back = dir_ / "back.csv";
  ASSERT_EQ(flexpipe("show zb-h1 -p 4 -m 8 --format csv -o " + csv.string()).exit_code, 0);
  ASSERT_EQ(flexpipe("convert " + csv.string() + " -o " + json.string()).exit_code, 0);
  ASSERT_EQ(flexpipe("convert " + json.string() + " -o " + back.string()).exit_code, 0);
  EXPECT_EQ(slurp(csv), slurp(back));
  Outcome lowered = flexpipe("convert " + csv.string() + " --form lowered -o " + back.string());
  ASSERT_EQ(lowered.exit_code, 0) << lowered.err;
  EXPECT_NE(slurp(back).find("SEND_F"), std::string::npos);
}

TEST_F(Cli, ParametersOnAFileAreRejected) {
  const fs::path csv = dir_ / "s.csv";
  ASSERT_EQ(flexpipe("show 1f1b --format csv -o " + csv.string()).exit_code, 0);
  Outcome run = flexpipe("simulate " + csv.string() + " -p 8");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "error: " + csv.string() +
                         ": -p, -m, -v and -D set a program's parameters; a schedule file fixes them itself\n");
  EXPECT_EQ(flexpipe("simulate " + csv.string() + " -D p=8").err, run.err);
}

TEST_F(Cli, EverySubcommandHasHelp) {
  for (const char* command : {"schedules", "show", "simulate", "check", "convert", "params", "model"}) {
    Outcome run = flexpipe(std::string(command) + " --help");
    EXPECT_EQ(run.exit_code, 0) << command;
    EXPECT_NE(run.out.find("Usage"), std::string::npos) << command << run.out;
  }
  EXPECT_EQ(flexpipe("").exit_code, 2);
  EXPECT_EQ(flexpipe("frobnicate").exit_code, 2);
}

}  // namespace

namespace {

const std::string kLibrary = std::string(FLEXPIPE_TEST_DATA) + "/../../examples/schedules/";

TEST_F(Cli, ProgramParametersComeFromDefines) {
  Outcome run = flexpipe("simulate " + kLibrary + "1f1b.fps -D p=4 -D m=8 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(run.out)["makespan"].get<double>(), 33.0);
  Outcome failed = flexpipe("simulate " + kLibrary + "interleaved-1f1b.fps -D p=4 -D m=6");
  EXPECT_EQ(failed.exit_code, 2);
  EXPECT_NE(failed.err.find("interleaved-1f1b.fps:6:23: error: m = 6: needs m to be a multiple of p"),
            std::string::npos)
      << failed.err;
  EXPECT_EQ(flexpipe("simulate " + kLibrary + "1f1b.fps -D p").exit_code, 2);
}

// Built-ins are programs: -p, -m and -v bind to a program file's parameters p, m and v, -D sets a
// built-in's parameters, and both ways give the same schedule.
TEST_F(Cli, ShapeOptionsAndDefinesMeanTheSameOnBuiltinsAndPrograms) {
  const auto makespan = [&](const std::string& args) {
    const Outcome run = flexpipe("simulate " + args + " --json");
    EXPECT_EQ(run.exit_code, 0) << args << run.err;
    return run.exit_code == 0 ? nlohmann::json::parse(run.out)["makespan"].get<double>() : -1.0;
  };
  const double builtin = makespan("interleaved-1f1b -p 2 -m 4 -v 3");
  EXPECT_EQ(makespan("interleaved-1f1b -D p=2 -D m=4 -D v=3"), builtin);
  EXPECT_EQ(makespan(kLibrary + "interleaved-1f1b.fps -p 2 -m 4 -v 3"), builtin);
  EXPECT_EQ(makespan(kLibrary + "interleaved-1f1b.fps -p 2 -D m=4 -v 3"), builtin);
  // zb-v-adaptive's own parameters reach the built-in: a larger memory budget is never slower.
  EXPECT_LE(makespan("zb-v-adaptive -p 4 -m 8 -D mem=16"), makespan("zb-v-adaptive -p 4 -m 8"));
  const Outcome checked = flexpipe("check " + kLibrary + "1f1b.fps -p 3 -m 5");
  EXPECT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_EQ(checked.out, kLibrary + "1f1b.fps: valid: 3 devices, 3 stages, 5 micro-batches, 30 actions\n");
  EXPECT_EQ(flexpipe("check 1f1b -p 3 -m 5").out, "1f1b: valid: 3 devices, 3 stages, 5 micro-batches, 30 actions\n");
}

TEST_F(Cli, ShapeOptionsAProgramDoesNotDeclareAreRefused) {
  const fs::path program = write("two.fps",
                                 "param n = 2\ndevices n\nmicrobatches 1\nstages n\nfor d in 0..n { F(d) }\n"
                                 "for d in 0..n { B(n - 1 - d) }\n");
  expect_refused({
      {"simulate " + program.string() + " -m 4",
       "error: " + program.string() +
           ": -m sets the program's parameter m, which it does not declare (its "
           "parameters: n)\n"},
      {"simulate 1f1b -p 3 -D p=4", "error: -p 3 and -D p=4 both set the parameter p: give one\n"},
      {"simulate 1f1b -D tf=2", "1f1b.fps: error: unknown parameter 'tf' set from outside (parameters: p, m)\n"},
  });
}

TEST_F(Cli, CheckPointsValidatorErrorsAtProgramLines) {
  const fs::path program = write("bad.fps",
                                 "devices 2\nmicrobatches 1\nstages 2\non 0 { F(0, 0)  B(0, 0) }\n"
                                 "on 1 { B(1, 0)  F(1, 0) }\n");
  Outcome run = flexpipe("check " + program.string());
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_EQ(run.out, program.string() +
                         ":5:8: error: device 1 #0 1B0: must run after 1F0 (#1)\n"
                         "    5 | on 1 { B(1, 0)  F(1, 0) }\n"
                         "      |        ^\n" +
                         program.string() + ": 1 error\n");
  const auto json = nlohmann::json::parse(flexpipe("check --json " + program.string()).out);
  EXPECT_EQ(json["errors"][0]["line"], 5);
  EXPECT_EQ(json["errors"][0]["column"], 8);
}

TEST_F(Cli, ExplainNamesTheLineOfEveryAction) {
  Outcome run = flexpipe("show " + kLibrary + "1f1b.fps -D p=2 -D m=2 --explain");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("  #1    0F1            " + kLibrary + "1f1b.fps:12:23  repeat m - warmup { F(d)  B(d) }"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("d1 |.  F0 B0 -- F1 B1 -- .  ."), std::string::npos) << run.out;
  Outcome steps = flexpipe("show " + kLibrary + "1f1b.fps -D p=2 -D m=2 --steps");
  ASSERT_EQ(steps.exit_code, 0) << steps.err;
  EXPECT_EQ(steps.out.substr(0, steps.out.find('\n')), kLibrary + "1f1b.fps:11:19: 0F0 -> device 0 #0");
  // Built-in names are served from the library programs, so they explain too.
  Outcome builtin = flexpipe("show 1f1b -p 2 -m 2 --explain");
  ASSERT_EQ(builtin.exit_code, 0) << builtin.err;
  EXPECT_NE(builtin.out.find("  #0    0F0            1f1b.fps:11:19"), std::string::npos) << builtin.out;
  const fs::path csv = dir_ / "s.csv";
  ASSERT_EQ(flexpipe("show 1f1b --format csv -o " + csv.string()).exit_code, 0);
  Outcome not_a_program = flexpipe("show " + csv.string() + " --explain");
  EXPECT_EQ(not_a_program.exit_code, 2);
  EXPECT_NE(not_a_program.err.find("--explain needs a program (.fps)"), std::string::npos) << not_a_program.err;
}

TEST_F(Cli, AnyScheduleConvertsToAProgramAndBack) {
  const fs::path program = dir_ / "zbv.fps", json = dir_ / "zbv.json", back = dir_ / "back.json";
  ASSERT_EQ(flexpipe("convert zb-v -p 4 -m 8 -o " + program.string()).exit_code, 0);
  ASSERT_EQ(flexpipe("convert zb-v -p 4 -m 8 -o " + json.string()).exit_code, 0);
  Outcome run = flexpipe("convert " + program.string() + " -o " + back.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(slurp(json), slurp(back));
}

}  // namespace

namespace {

const std::string kExamples = std::string(FLEXPIPE_TEST_DATA) + "/../../examples/";

// The examples the README points at stay valid and simulate within their memory capacity.
TEST_F(Cli, ExamplesStayValid) {
  Outcome check = flexpipe("check " + kExamples + "offload-1f1b-2dev.json");
  EXPECT_EQ(check.exit_code, 0) << check.out;
  Outcome offload = flexpipe("simulate " + kExamples + "offload-1f1b-2dev.json --costs " + kExamples +
                             "costs/2stage-offload.json --json");
  ASSERT_EQ(offload.exit_code, 0) << offload.err;
  const auto report = nlohmann::json::parse(offload.out);
  EXPECT_TRUE(report["fits"].get<bool>());
  // Static memory per device: parameters 2 + gradients 2 + optimizer state 12.
  EXPECT_DOUBLE_EQ(report["devices"][0]["static_memory"].get<double>(), 16.0);
  Outcome gpt = flexpipe("simulate zb-h1 -p 4 -m 8 --costs " + kExamples + "costs/gpt-4stage-illustrative.json --json");
  ASSERT_EQ(gpt.exit_code, 0) << gpt.err;
  EXPECT_TRUE(nlohmann::json::parse(gpt.out)["fits"].get<bool>());
}

}  // namespace

namespace {

TEST_F(Cli, ParamsListsAProgramsParametersAndRanges) {
  const std::string program = std::string(FLEXPIPE_TEST_DATA) + "/../../examples/schedules/dualpipev.fps";
  Outcome run = flexpipe("params " + program + " -D p=8 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto params = nlohmann::json::parse(run.out);
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]["name"], "p");
  EXPECT_EQ(params[0]["value"], 8);
  EXPECT_EQ(params[0]["min"], 1);
  EXPECT_EQ(params[1]["name"], "m");
  EXPECT_EQ(params[1]["value"], 16);  // default 2 * p
  EXPECT_EQ(params[1]["min"], 16);    // where m >= 2 * p
  EXPECT_TRUE(params[1]["max"].is_null());
  Outcome failing = flexpipe("params " + program + " -D m=2");
  ASSERT_EQ(failing.exit_code, 0) << failing.err;
  EXPECT_NE(failing.out.find("(fails)"), std::string::npos) << failing.out;
  const Outcome builtin = flexpipe("params zb-v-adaptive -D p=2");
  ASSERT_EQ(builtin.exit_code, 0) << builtin.err;
  EXPECT_NE(builtin.out.find("mem                 4        4        -  mem >= 2 * p"), std::string::npos)
      << builtin.out;
  EXPECT_EQ(flexpipe("params nope").err,
            "error: nope: params needs a program: a built-in schedule's name or a file (.fps)\n");
  EXPECT_EQ(flexpipe("params " + program + " -D m=x").exit_code, 2);
}

}  // namespace

namespace {

TEST_F(Cli, EveryCommandRejectsAnInvalidScheduleWithOneMessage) {
  // Stage 1 never runs its backward of micro-batch 0: show, simulate and convert refuse with the same text.
  const fs::path csv = write("broken.csv", "0F0,0B0\n1F0\n");
  const std::string expected = "error: " + csv.string() + ": invalid schedule (";
  Outcome show = flexpipe("show " + csv.string());
  EXPECT_EQ(show.exit_code, 2);
  EXPECT_EQ(show.err.rfind(expected, 0), 0u) << show.err;
  Outcome simulate = flexpipe("simulate " + csv.string());
  EXPECT_EQ(simulate.exit_code, 2);
  EXPECT_EQ(simulate.err, show.err);
  Outcome convert = flexpipe("convert " + csv.string() + " -o " + (dir_ / "out.json").string());
  EXPECT_EQ(convert.exit_code, 2);
  EXPECT_EQ(convert.err, show.err);
}

TEST_F(Cli, LetteringIsDetectedOrForced) {
  // 1F1B on 2 ranks in the legacy lettering: BW is the full backward.
  const fs::path csv = write("legacy.csv", "0F0,0F1,0BW0,0BW1\n1F0,1BW0,1F1,1BW1\n");
  Outcome detected = flexpipe("check " + csv.string());
  EXPECT_EQ(detected.exit_code, 0) << detected.out << detected.err;
  EXPECT_EQ(flexpipe("check " + csv.string() + " --lettering legacy").exit_code, 0);
  Outcome forced = flexpipe("check " + csv.string() + " --lettering current");
  EXPECT_EQ(forced.exit_code, 2);
  EXPECT_NE(forced.err.find("BW is the legacy lettering's full backward"), std::string::npos) << forced.err;
  EXPECT_EQ(flexpipe("check " + csv.string() + " --lettering sideways").exit_code, 2);
}

}  // namespace
