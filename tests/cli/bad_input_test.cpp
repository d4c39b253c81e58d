// Bad input on the command line and in files: one clear error, a non-zero exit, never a silent default.
#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_harness.h"

namespace {

using flexpipe::test::Outcome;

class BadInput : public flexpipe::test::CliHarness {
 protected:
  BadInput() : CliHarness("flexpipe_bad_input_") {}
};

TEST_F(BadInput, ZeroOrNegativeCountsAreRefusedNotReplacedByDefaults) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"simulate 1f1b -p 0", "--devices: must be a whole number of at least 1, got 0"},
      {"simulate 1f1b -m 0", "--microbatches: must be a whole number of at least 1, got 0"},
      {"simulate 1f1b -v 0", "--chunks: must be a whole number of at least 1, got 0"},
      {"simulate 1f1b -p -3", "--devices: must be a whole number of at least 1, got -3"},
      {"simulate 1f1b -p two", "--devices: must be a whole number of at least 1, got 'two'"},
      {"partition --model gpt3-1.3b -p 0 --memory-limit 1e10",
       "--devices: must be a whole number of at least 1, got 0"},
      {"train -p 0", "--devices: must be a whole number of at least 1, got 0"},
      {"train -m 0", "--microbatches: must be a whole number of at least 1, got 0"},
      {"search --model gpt3-1.3b -p 0 -m 8", "--devices: must be a whole number of at least 1, got 0"},
  };
  expect_refused(cases, 2, true);
}

TEST_F(BadInput, LimitsAndRatesMustBeQuantitiesInTheirRange) {
  const std::string search = "search --model gpt3-1.3b -p 4 -m 8 ";
  const std::string size = "; write 80GiB, 85.9GB or 85899345920";
  const std::string bandwidth = "; write 900GB/s, 64GiB/s or 9e11 (bytes per second)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {search + "--memory-limit '80 GiBs'", "--memory-limit: '80 GiBs' is not a size" + size},
      {search + "--memory-limit 80gb", "--memory-limit: '80gb' is not a size" + size},
      {search + "--memory-limit 0", "--memory-limit: '0' is not a positive size" + size},
      {search + "--memory-limit -5", "--memory-limit: '-5' is not a positive size" + size},
      {search + "--memory-limit nan", "--memory-limit: 'nan' is not a positive size" + size},
      {search + "--memory-limit inf", "--memory-limit: 'inf' is not a positive size" + size},
      {search + "--link-bandwidth 900GB", "--link-bandwidth: '900GB' is not a bandwidth" + bandwidth},
      {search + "--link-bandwidth -5",
       "--link-bandwidth: '-5' is not a positive bandwidth, or inf for no limit" + bandwidth},
      {search + "--link-bandwidth 0",
       "--link-bandwidth: '0' is not a positive bandwidth, or inf for no limit" + bandwidth},
      {search + "--host-bandwidth -5",
       "--host-bandwidth: '-5' is not a bandwidth of at least 0, or inf for no limit" + bandwidth},
      {search + "--link-latency nan",
       "--link-latency: 'nan' is not a time of at least 0; write 5us, 0.01ms or 0.01 (in the model's time unit)"},
      {search + "--time-budget 5mins", "--time-budget: '5mins' is not a time; write 10s, 500ms or 10 (seconds)"},
      {search + "--time-budget 0", "--time-budget: '0' is not a positive time; write 10s, 500ms or 10 (seconds)"},
      {search + "--max-chunks 20", "--max-chunks: must be a whole number from 1 to 16, got 20"},
      {"simulate 1f1b --memory-limit nan",
       "--memory-limit: 'nan' is not a positive size; write 80GiB, 85.9GB or 8 (in the cost table's memory unit)"},
      {"partition --model gpt3-1.3b --memory-limit 1e10 --host-bandwidth -1",
       "--host-bandwidth: '-1' is not a bandwidth of at least 0, or inf for no limit" + bandwidth},
      {"train --lr nan", "--lr: must be a number of at least 0, got 'nan'"},
      {"train --min-lr-ratio 2", "--min-lr-ratio: must be a number from 0 to 1, got '2'"},
      {"train --timeout 0", "--timeout: '0' is not a positive time; write 10s, 500ms or 10 (seconds)"},
      {"launch -n 2 --grace 1h30 -- true", "--grace: '1h30' is not a time; write 10s, 500ms or 10 (seconds)"},
      {"capture m.py:f --input 8x3 -o g.json --warmup -1", "--warmup: must be a whole number of at least 0, got -1"},
      {"export g.json --plan p.json -o out --export-tolerance -1e-9",
       "--export-tolerance: must be a number of at least 0, got '-1e-9'"},
      {"train --model g.json --plan p.json --export-tolerance tight",
       "--export-tolerance: must be a number of at least 0, got 'tight'"},
      // --plain-sgd sets these; given too, one of them would silently lose.
      {"train --plain-sgd --clip 1", "--clip excludes --plain-sgd"},
      {"train --optimizer adamw --plain-sgd", "--optimizer excludes --plain-sgd"},
  };
  expect_refused(cases, 2, true);
}

TEST_F(BadInput, AUnitTheCostsCannotConvertIsRefused) {
  expect_refused({{"simulate 1f1b --memory-limit 8GB",
                   "error: --memory-limit: 8GB cannot be converted: the costs count memory in 'unit'; give a bare "
                   "number in it\n"}});
}

TEST_F(BadInput, MistypedSubcommandsAndOptionsGetTheClosestName) {
  expect_refused({
      {"simulte 1f1b", "error: unknown subcommand 'simulte'; did you mean 'simulate'? (flexpipe --help lists them)\n"},
      {"frobnicate", "error: unknown subcommand 'frobnicate' (flexpipe --help lists them)\n"},
      {"", "error: name a subcommand (flexpipe --help lists them)\n"},
      {"simulate 1f1b --memroy-limit 8",
       "error: simulate: unexpected arguments '--memroy-limit' (did you mean --memory-limit?), '8'; see flexpipe "
       "simulate --help\n"},
      {"simulate 1f1b --bogus extra",
       "error: simulate: unexpected arguments '--bogus', 'extra'; see flexpipe simulate --help\n"},
      {"model lst", "error: model: unknown subcommand 'lst'; did you mean 'list'? (see flexpipe model --help)\n"},
      {"model", "error: model: name a subcommand: list, show, compare, export (see flexpipe model --help)\n"},
      {"model show gpt3-1.3b --layerz",
       "error: model show: unexpected argument '--layerz' (did you mean --layers?); see flexpipe model show --help\n"},
  });
  expect_refused({{"partition -p 4", "--model is required"}}, 2, true);
}

TEST_F(BadInput, TrainChecksTheJobOnceBeforeStartingAnyRank) {
  // 100 pipeline stages cannot be cut from the default model's 54 operators: one error from the
  // launcher, not one from each of 100 ranks.
  const Outcome run = flexpipe("train -p 100 --steps 1");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "error: 1f1b: partition: cannot cut 54 operators of gpt-4x64 into 100 non-empty stages\n");
  EXPECT_EQ(run.out, "");
}

// Without --plan train partitions a captured model for the run under the hardware's memory; one that
// cannot fit is one error, before anything is exported or any rank starts, naming the limit and the way out.
TEST_F(BadInput, ACapturedModelThatDoesNotFitWithoutAPlan) {
  nlohmann::json graph =
      nlohmann::json::parse(flexpipe::test::slurp(FLEXPIPE_TEST_DATA "/captured/tiny_unet.graph.json"));
  graph["nodes"][1]["parameters"] = 1e11;  // down1: 1.6 TB of weights, gradients and AdamW's moments
  const std::string path = write("big.graph.json", graph.dump()).string();
  const Outcome run = flexpipe("train --model " + path + " -p 2 -m 4 --steps 1");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "error: --model " + path +
                         ": no --plan, and the default partition does not fit H100-80GB's memory: dawn: 'TinyUNet' "
                         "does not fit 2 devices with 80.00 GB each at micro-batch 2 under 1f1b: a device needs 1.52 "
                         "TB more even with every recompute and offload the method allows; try more devices, a smaller "
                         "micro-batch or a faster host link; or give --plan PLAN.json made with a larger limit "
                         "(flexpipe partition --model " +
                         path + " -p 2 -m 4 --memory-limit SIZE -o PLAN.json)\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "big.graph.plan.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "big.graph.export"));
}

TEST_F(BadInput, AWarmUpLongerThanTheRunIsReportedOnce) {
  // The partition error comes after the warning and before any runtime is loaded.
  const std::string partition_error =
      "error: 1f1b: partition ops:1,2: the stages hold 3 operators but the graph 'gpt-4x64' has 54\n";
  Outcome run = flexpipe("train --steps 5 -p 1 --partition ops:1,2");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err,
            "warning: --warmup 10 is longer than the run (5 steps): the learning rate only rises, to 0.0015 (50% of "
            "--lr 0.003), and never decays; give --warmup 5 or less to reach it\n" +
                partition_error);
  run = flexpipe("train --steps 5 --warmup 5 -p 1 --partition ops:1,2");
  EXPECT_EQ(run.err, partition_error);
}

TEST_F(BadInput, TrainAndRunTakeABuiltinsDevicesFromItsDefineToo) {
  // -D p=3 is the schedule's p: train plans 3 stages (not its default 2), run expects 3 ranks (not the job's 1).
  expect_refused({
      {"train -D p=3 --steps 1 --partition ops:1,53",
       "error: 1f1b: partition ops:1,53: --partition makes 2 stages but the schedule has 3\n"},
      {"run 1f1b -D p=3",
       "error: 1f1b runs on 3 devices but this job has 1 rank (WORLD_SIZE); start it with `flexpipe launch -n 3 -- "
       "flexpipe ...`\n"},
      {"train -D p=3 -p 2 --steps 1", "error: -p 2 and -D p=3 both set the parameter p: give one\n"},
  });
}

TEST_F(BadInput, CheckPrintsAScreenfulOfErrorsAndCountsTheRest) {
  // 60 forwards without a backward: 60 errors, of which 50 are printed.
  std::string row;
  for (int i = 0; i < 60; ++i) row += (i ? "," : "") + std::string("0F") + std::to_string(i);
  const auto path = write("forwards.csv", row + "\n");
  const Outcome run = flexpipe("check " + path.string());
  EXPECT_EQ(run.exit_code, 1);
  std::vector<std::string> lines;
  for (size_t start = 0; start < run.out.size();) {
    const size_t end = run.out.find('\n', start);
    lines.push_back(run.out.substr(start, end - start));
    start = end + 1;
  }
  ASSERT_EQ(lines.size(), 52u) << run.out;
  EXPECT_EQ(lines[0], path.string() + ": device 0: missing 0B0 (or 0I0 and 0W0)");
  EXPECT_EQ(lines[50], path.string() + ": ... and 10 more errors not shown");
  EXPECT_EQ(lines[51], path.string() + ": 60 errors");
}

TEST_F(BadInput, AProgramMayStartWithAByteOrderMark) {
  const auto path = write("marked.fps",
                          "\xEF\xBB\xBF"
                          "devices 2\nmicrobatches 1\nstages 2\nF(0, 0)\nF(1, 0)\nB(1, 0)\nB(0, 0)\n");
  const Outcome run = flexpipe("check " + path.string());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, path.string() + ": valid: 2 devices, 2 stages, 1 micro-batches, 4 actions\n");
}

TEST_F(BadInput, AnOperatorTimeNearADoublesRangeIsRefusedWhereItStands) {
  // 1e308 once crashed the search (a stalled rebuild read as a schedule) and made simulate and
  // partition print "makespan inf" and succeed.
  ASSERT_EQ(flexpipe("model export gpt3-1.3b -o " + (dir_ / "g.json").string()).exit_code, 0);
  nlohmann::json graph = nlohmann::json::parse(flexpipe::test::slurp(dir_ / "g.json"));
  graph["nodes"][3]["forward"]["time"] = 1e308;
  const std::string path = write("huge.json", graph.dump()).string();
  const std::string error = "error: " + path + ": nodes[3].forward.time: is too large, got 1e+308 (at most 1e30)\n";
  for (const std::string& args :
       {"search --model " + path + " -p 4 -m 8 --threads 1 -q", "simulate 1f1b -p 4 --model " + path,
        "partition --model " + path + " -p 4 --memory-limit 80e9"}) {
    const Outcome run = flexpipe(args);
    EXPECT_EQ(run.exit_code, 2) << args;
    EXPECT_EQ(run.err, error) << args;
  }
}

// What the command line and the files say is quoted with every byte that is not UTF-8 text escaped:
// before, an option's value, a schedule's name and the JSON parser's "last read" reached the terminal raw.
TEST_F(BadInput, BytesThatAreNotUtf8AreQuotedEscaped) {
  const Outcome name = flexpipe("simulate 'zb\xFF' -p 2 -m 2");
  EXPECT_EQ(name.exit_code, 2);
  EXPECT_TRUE(name.err.starts_with("error: unknown schedule 'zb\\xFF' (built-in schedules: gpipe, ")) << name.err;
  const std::string graph = write("bad.json", "{\"format\": \"flexpipe-cost-graph\", \"name\": \"a\xFF\"}").string();
  expect_refused({{"simulate 1f1b -p 2 -m '\xFF'",
                   "error: --microbatches: must be a whole number of at least 1, got '\\xFF' (see flexpipe simulate "
                   "--help)\n"},
                  {"simulate 1f1b -p 2 -m 2 '--x\xFE'",
                   "error: simulate: unexpected argument '--x\\xFE'; see flexpipe simulate --help\n"},
                  {"model show " + graph,
                   "error: " + graph +
                       ":1:45: invalid JSON: syntax error while parsing value - invalid string: ill-formed UTF-8 byte; "
                       "last read: '\"a\\xFF'\n"}});
}

TEST_F(BadInput, AFifoOrADeviceIsRefusedAtOnceNotReadForever) {
  // A FIFO once blocked every reader forever (the harness's timeout ends a hang), /dev/zero ran to
  // bad_alloc, and --data said "no such file".
  const std::string fifo = (dir_ / "graph.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused({
      {"simulate 1f1b -p 4 --model " + fifo, "error: " + fifo + ": cannot read: is a FIFO, not a regular file\n"},
      {"check " + fifo, "error: " + fifo + ": cannot read: is a FIFO, not a regular file\n"},
      {"simulate 1f1b -p 4 --model /dev/zero",
       "error: /dev/zero: cannot read: is a character device, not a regular file\n"},
      {"train --steps 1 --data " + fifo, "error: --data " + fifo + ": is a FIFO, not a regular file\n"},
      {"train --steps 1 --data /dev/urandom",
       "error: --data /dev/urandom: is a character device, not a regular file\n"},
      {"train --steps 1 --data " + dir_.string(),
       "error: --data " + dir_.string() + ": is a directory, not a regular file\n"},
  });
}

TEST_F(BadInput, ATimeoutUnderAMillisecondOrAnEmptyPartitionIsRefused) {
  // --timeout 1ns became a wait of 0 ms; --partition '' meant no partition; both in silence.
  const std::string shorter = " is shorter than 1ms, the shortest wait a rank keeps; write 10s, 500ms or 10 (seconds)";
  const std::string empty =
      "--partition: empty; give ops:N,N,..., layers:N,N,... or a Megatron layout, or leave the option out";
  expect_refused(
      {
          {"train --timeout 1ns", "--timeout: '1ns'" + shorter},
          {"train --timeout 0.0009", "--timeout: '0.0009'" + shorter},
          {"run 1f1b --timeout 999us", "--timeout: '999us'" + shorter},
          {"train --partition ''", empty},
          {"train --partition ' '", empty},
          {"simulate 1f1b -p 4 --model gpt3-1.3b --partition ''", empty},
      },
      2, true);
}

}  // namespace
