// Real processes: `flexpipe launch -n N -- flexpipe run ... --verify` over Gloo on loopback, one
// torch thread per rank, a free port per launch. Every built-in schedule on 2, 3 and 4 ranks must
// equal the single-process run; a rank that dies or hangs must make the others fail, naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "../cli/cli_harness.h"

namespace flexpipe::test {
namespace {

const std::string kBinary = FLEXPIPE_BINARY;
const std::string kData = FLEXPIPE_TEST_DATA;
const std::string kAllBuiltins = "1f1b gpipe zb-h1 zb-h2 interleaved-1f1b looped-bfs zb-v v-half v-min dualpipev";

class MultiProcess : public CliHarness {
 protected:
  MultiProcess() : CliHarness("flexpipe_multiprocess_") {}

  Outcome launch(int ranks, const std::string& run_args, const std::string& launch_args = "--grace 1") {
    return flexpipe("launch -n " + std::to_string(ranks) + " " + launch_args + " -- " + kBinary + " run " + run_args);
  }

  // Runs the schedules with --verify --json and checks every run: exact, and the same losses as the
  // first when they split the batch into as many micro-batches (same model, same data).
  void expect_exact(int ranks, const std::string& schedules, const std::string& extra, size_t expected_runs) {
    const Outcome run = launch(ranks, schedules + " --verify --json " + extra);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    const nlohmann::json report = nlohmann::json::parse(run.out);
    ASSERT_EQ(report["runs"].size(), expected_runs);
    const nlohmann::json& first = report["runs"][0];
    for (const nlohmann::json& r : report["runs"]) {
      const std::string name = r["schedule"].get<std::string>();
      EXPECT_EQ(r["ranks"].get<int>(), ranks) << name;
      EXPECT_TRUE(r["verify"]["passed"].get<bool>()) << name;
      EXPECT_LE(r["verify"]["parameter_difference"].get<double>(), 1e-6) << name;
      EXPECT_LE(r["verify"]["loss_difference"].get<double>(), 1e-6) << name;
      if (r["microbatches"] != first["microbatches"]) continue;  // another batch, another loss
      for (size_t step = 0; step < r["steps"].size(); ++step)
        EXPECT_NEAR(r["steps"][step]["loss"].get<double>(), first["steps"][step]["loss"].get<double>(), 1e-9) << name;
      expect_timing_report(r, name);
    }
  }

  // The timing report of a run of two steps or more: the first step is the warm-up, the others are timed.
  static void expect_timing_report(const nlohmann::json& r, const std::string& name) {
    const int steps = static_cast<int>(r["steps"].size());
    ASSERT_GE(steps, 2) << name;
    EXPECT_EQ(r["timed_steps"], (nlohmann::json{{"first", 1}, {"count", steps - 1}})) << name;
    const double measured = r["measured_makespan_ms"].get<double>(),
                 predicted = r["predicted_makespan_ms"].get<double>();
    EXPECT_GT(measured, 0) << name;
    const nlohmann::json& spread = r["measured_makespan_spread_ms"];
    EXPECT_LE(spread["min"].get<double>(), spread["p25"].get<double>()) << name;
    EXPECT_LE(spread["p25"].get<double>(), measured) << name;
    EXPECT_LE(measured, spread["p75"].get<double>()) << name;
    EXPECT_LE(spread["p75"].get<double>(), spread["max"].get<double>()) << name;
    EXPECT_NEAR(r["gap_percent"].get<double>(), 100 * (measured - predicted) / measured, 1e-9) << name;
    // The transport read off the traces: eager latency, rendezvous and the host times per message.
    for (const char* field : {"latency", "rendezvous", "send_cpu", "receive_cpu"}) {
      ASSERT_TRUE(r["measured_link_ms"].contains(field)) << name << " " << field;
      EXPECT_GE(r["measured_link_ms"][field].get<double>(), 0) << name << " " << field;
    }
    ASSERT_EQ(r["breakdown_ms"].size(), static_cast<size_t>(r["ranks"].get<int>() / r["data_parallel"].get<int>()))
        << name;
    for (const nlohmann::json& b : r["breakdown_ms"]) {
      const nlohmann::json& s = b["simulated"];
      // The simulated parts are one step's, so they add up to it exactly.
      EXPECT_NEAR(s["compute"].get<double>() + s["transfer"].get<double>() + s["waiting"].get<double>(), predicted,
                  1e-9 * predicted)
          << name;
      EXPECT_EQ(s["overhead"].get<double>(), 0) << name;
      for (const char* part : {"compute", "transfer", "waiting", "overhead"})
        EXPECT_GE(b["measured"][part].get<double>(), 0) << name << " " << part;
    }
  }
};

TEST_F(MultiProcess, EveryBuiltinIsExactOnTwoRanks) {
  expect_exact(2, kAllBuiltins + " dualpipe", "--dtype float64 --layers 4 --steps 3", 11);
}

TEST_F(MultiProcess, EveryBuiltinIsExactOnThreeRanks) {
  // DualPipe needs an even number of devices; its V-shaped half runs on three.
  expect_exact(3, kAllBuiltins, "--dtype float64 --layers 4 --steps 3", 10);
}

TEST_F(MultiProcess, EveryBuiltinIsExactOnFourRanks) {
  expect_exact(4, kAllBuiltins + " dualpipe", "--dtype float64 --layers 4 --steps 3", 11);
}

TEST_F(MultiProcess, RecomputeAndOffloadAreExactOnThreeAndFourRanks) {
  // Every stage but the last offloads its even warm-up micro-batches and recomputes its odd ones.
  expect_exact(3, kData + "/runtime/1f1b-memory.fps", "-D p=3 --dtype float64 --layers 3 --steps 3", 1);
  expect_exact(4, kData + "/runtime/1f1b-memory.fps", "--dtype float64 --layers 4 --steps 3", 1);
}

TEST_F(MultiProcess, Float32WithSgdIsExactToOneMillionth) {
  expect_exact(4, "1f1b zb-h2 interleaved-1f1b dualpipev", "--optimizer sgd --lr 0.1 --steps 3", 4);
}

TEST_F(MultiProcess, SchedulesFromFilesTrainToo) {
  // PyTorch CSV (1F1B, and zero-bubble on a looped placement), a FlexPipe JSON with OFFLOAD, RELOAD,
  // R, a custom operation and OPT, and a program with its own stage-wide operation.
  expect_exact(2,
               kData + "/pytorch/handwritten_1f1b_2rank_4mb.csv " + kData +
                   "/pytorch/loop_zb_2rank_4stage_compute.csv " + kData + "/../../examples/offload-1f1b-2dev.json " +
                   kData + "/runtime/1f1b-sync.fps",
               "--dtype float64 --hook GRAD_ALLREDUCE=noop --hook SYNC_GRADS=noop", 4);
  expect_exact(3, kData + "/pytorch/dualpipev_3rank_7mb.csv", "--dtype float64 --layers 3", 1);
}

TEST_F(MultiProcess, CustomOperationsRunTheirHooks) {
  const Outcome run = launch(2, kData + "/runtime/1f1b-sync.fps --hook SYNC_GRADS=log --steps 2");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* line :
       {"rank 0: step 0 SYNC_GRADS stage 0 micro-batch -1", "rank 1: step 1 SYNC_GRADS stage 1 micro-batch -1"})
    EXPECT_NE(run.err.find(line), std::string::npos) << run.err;
  const Outcome unmapped = launch(2, kData + "/runtime/1f1b-sync.fps");
  EXPECT_EQ(unmapped.exit_code, 2);
  EXPECT_NE(unmapped.err.find("uses operation SYNC_GRADS but no hook is registered for it"), std::string::npos)
      << unmapped.err;
}

TEST_F(MultiProcess, AMismatchIsReportedAndFailsTheRun) {
  // AdamW turns float32 rounding noise in mathematically zero gradients (the key bias: softmax
  // ignores it) into real updates, so float32 AdamW is not exact to 1e-9; --verify must say so.
  const Outcome run = launch(2, "1f1b --verify --tolerance 1e-9 --lr 1e-2");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.out.find(": MISMATCH"), std::string::npos) << run.out;
  EXPECT_NE(run.err.find("differs from the single-process run by"), std::string::npos) << run.err;
}

TEST_F(MultiProcess, MeasuredTimelineIsWrittenAsTraceAndSvg) {
  const std::filesystem::path trace = dir_ / "run.trace.json", svg = dir_ / "run.svg";
  const Outcome run = launch(2, "zb-h1 --trace " + trace.string() + " --svg " + svg.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("simulated from the mean action times"), std::string::npos) << run.out;
  const nlohmann::json events = nlohmann::json::parse(slurp(trace))["traceEvents"];
  std::set<int> devices;
  int complete = 0;
  for (const auto& e : events)
    if (e["ph"] == "X") {
      ++complete;
      devices.insert(e["pid"].get<int>());
    }
  // zb-h1 on 2 devices, 4 micro-batches: 12 compute actions per device, plus the transfers.
  EXPECT_GE(complete, 24);
  EXPECT_EQ(devices.size(), 2u);
  EXPECT_NE(slurp(svg).find("<svg"), std::string::npos);
}

TEST_F(MultiProcess, ADeadRankMakesTheOthersFailNamingItAndTheAction) {
  // No hang: the harness ends the command after 60 s (exit 124, not the code below).
  const Outcome run = launch(3, "1f1b --steps 3 --timeout 20 --fault 1:1:4", "--grace 10");
  EXPECT_EQ(run.exit_code, 128 + 9) << run.err;  // the first failure: rank 1, SIGKILL
  EXPECT_NE(run.err.find("flexpipe launch: rank 1"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("killed by signal 9"), std::string::npos) << run.err;
  // Its neighbours notice on their own, before the launcher's grace period ends (10 s, well before
  // their own 20 s timeout): ended by the launcher, they would print no error of their own.
  for (const char* who : {"error: rank 0: step 1, action ", "error: rank 2: step 1, action "}) {
    const size_t at = run.err.find(who);
    ASSERT_NE(at, std::string::npos) << run.err;
    const std::string line = run.err.substr(at, run.err.find('\n', at) - at);
    EXPECT_NE(line.find("waiting for rank 1"), std::string::npos) << line;
  }
}

TEST_F(MultiProcess, ASilentRankTimesOutTheOthersAndIsEnded) {
  // No hang: a silent rank that were never ended would run into the harness's 60 s (exit 124).
  const Outcome run = launch(3, "1f1b --steps 3 --timeout 2 --fault 1:1:4:hang", "--grace 1");
  EXPECT_EQ(run.exit_code, 3) << run.err;  // the first failure: a neighbour that timed out
  for (const char* who : {"error: rank 0: step 1, action ", "error: rank 2: step 1, action "}) {
    const size_t at = run.err.find(who);
    ASSERT_NE(at, std::string::npos) << run.err;
    const std::string line = run.err.substr(at, run.err.find('\n', at) - at);
    EXPECT_NE(line.find("waiting for rank 1"), std::string::npos) << line;
    EXPECT_NE(line.find("Timed out waiting 2000ms"), std::string::npos) << line;
  }
  EXPECT_NE(run.err.find("sending SIGTERM to rank 1"), std::string::npos) << run.err;
}

TEST_F(MultiProcess, AnInvalidScheduleIsRejectedBeforeAnyRankConnects) {
  // Rank 0 of a 2-rank job whose peer never comes: validation must fail first, not the rendezvous.
  const std::string env = "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 ";
  const std::filesystem::path out = dir_ / "out", err = dir_ / "err";
  const int status = std::system((env + "timeout 30 " + kBinary + " run " + kData +
                                  "/runtime/missing-backward.json --timeout 20 >" + out.string() + " 2>" + err.string())
                                     .c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_EQ(slurp(err), "error: " + kData +
                            "/runtime/missing-backward.json: invalid schedule (1 error)\n"
                            "  device 0: missing 0B1 (or 0I1 and 0W1)\n");
}

TEST_F(MultiProcess, AJobOfTheWrongSizeIsRefused) {
  const Outcome run = launch(2, "1f1b -p 4");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("error: 1f1b runs on 4 devices but this job has 2 ranks (WORLD_SIZE)"), std::string::npos)
      << run.err;
}

}  // namespace
}  // namespace flexpipe::test
