// partition, search and simulate --model on a DAG cost graph: tests/data/unet-small.graph.json, the
// two-level U-Net of tests/common/dag_graphs.h in MB per sample and millions of parameters. Its
// skips enc1 -> cat1 (8 MB) and enc2 -> cat2 (4 MB) cross every cut between them, and the
// concatenations that read them save nothing.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_harness.h"

namespace flexpipe::test {
namespace {

class DagModel : public CliHarness {
 protected:
  DagModel() : CliHarness("flexpipe_dag_model_") {}
  const std::string graph_ = std::string(FLEXPIPE_TEST_DATA) + "/unet-small.graph.json";
  static constexpr double kMB = 1e6;
};

// Cut after enc1, enc2 and mid: every cut sends what crosses it, the skips included, forward and
// (their gradients) back; the stages the skips reach hold them as their input.
TEST_F(DagModel, SimulateSendsEachSkipOverEveryCutAndHoldsItOnEveryStageItReaches) {
  const Outcome run = flexpipe("simulate 1f1b -p 4 -m 8 --model " + graph_ + " --partition ops:2,2,2,7 --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  // Cut 0: enc1 (8). Cut 1: enc2 (4) and enc1 (8). Cut 2: mid (2), enc2 (4) and enc1 (8). Each of 8
  // micro-batches crosses them both ways.
  EXPECT_DOUBLE_EQ(j["comm_bytes"].get<double>(), 8 * 2 * (8 + 12 + 14) * kMB);
  // 1F1B holds k = 4, 3, 2, 1 micro-batches; static memory is 16 bytes per parameter.
  // Device 0 (in, enc1): 3M parameters, saved 2 + 8.
  // Device 1 (down1, enc2): 2M; saved 8 + 4, enc1's output is down1's saved input.
  // Device 2 (down2, mid): 2M; saved 4 + 2, and enc1's 8 carried through to cat1.
  // Device 3 (up2 .. head): 5M; saved 2 + 0 + 8 + 4 + 0 + 16 + 8, and the 4 + 8 the concatenations read.
  const double expected[4] = {(48 + 4 * 10) * kMB, (32 + 3 * 12) * kMB, (32 + 2 * (6 + 8)) * kMB, (80 + 38 + 12) * kMB};
  for (int d = 0; d < 4; ++d) EXPECT_DOUBLE_EQ(j["devices"][d]["peak_memory"].get<double>(), expected[d]) << d;
}

// At 90 MB per device the plan must recompute or offload. Dawn finds exhaustive search's bottleneck,
// the plan says what each stage holds as its input, and simulate reproduces the plan's figures.
TEST_F(DagModel, PartitionFindsTheExhaustiveOptimumAndSimulateReproducesIt) {
  const std::string plan = (dir_ / "plan.json").string();
  const std::string args = "partition --model " + graph_ + " -p 4 -m 8 --memory-limit 90e6";
  const Outcome made = flexpipe(args + " -o " + plan);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const nlohmann::json p = nlohmann::json::parse(slurp(plan));
  ASSERT_TRUE(p["fits"].get<bool>());
  const Outcome exhaustive = flexpipe(args + " --method exhaustive --json");
  ASSERT_EQ(exhaustive.exit_code, 0) << exhaustive.err;
  EXPECT_NEAR(p["bottleneck"].get<double>(), nlohmann::json::parse(exhaustive.out)["bottleneck"].get<double>(),
              1e-9 * p["bottleneck"].get<double>());
  // in enc1 | down1 enc2 down2 mid | up2 cat2 dec2 | up1 cat1 dec1 head. Stage 1 reads enc1's output
  // in down1, which saves it; stage 2 holds enc1's skip (carried) and enc2's (cat2 saves nothing);
  // stage 3 holds enc1's.
  int recomputed = 0;
  std::vector<std::string> firsts;
  for (const auto& stage : p["stages"]) {
    firsts.push_back(stage["first"].get<std::string>());
    recomputed += static_cast<int>(stage["recompute"].size());
    EXPECT_LE(stage["memory"].get<double>(), 90e6);
  }
  EXPECT_EQ(firsts, (std::vector<std::string>{"in", "down1", "up2", "up1"}));
  EXPECT_GT(recomputed, 0);
  EXPECT_DOUBLE_EQ(p["stages"][1]["held_input_bytes"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(p["stages"][2]["held_input_bytes"].get<double>(), (8 + 4) * kMB);
  EXPECT_DOUBLE_EQ(p["stages"][3]["held_input_bytes"].get<double>(), 8 * kMB);
  const Outcome simulated = flexpipe("simulate 1f1b -p 4 -m 8 --plan " + plan + " --json");
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  const nlohmann::json s = nlohmann::json::parse(simulated.out);
  EXPECT_DOUBLE_EQ(s["makespan"].get<double>(), p["step_time"].get<double>());
  for (size_t d = 0; d < 4; ++d) {
    EXPECT_DOUBLE_EQ(s["devices"][d]["peak_memory"].get<double>(), p["peak_memory"][d].get<double>());
    EXPECT_LE(s["devices"][d]["peak_memory"].get<double>(), 90e6);
  }
}

// From the least memory that fits to ample: Dawn's bottleneck is exhaustive search's, and its plan
// passes the simulation check in the first round (the model and the simulation agree on the DAG).
TEST_F(DagModel, AtEveryLimitDawnEqualsExhaustiveSearchAndTheSimulationAgrees) {
  for (const char* limit : {"90e6", "95e6", "100e6", "110e6"}) {
    const std::string args = "partition --model " + graph_ + " -p 4 -m 8 --memory-limit " + limit + " --json";
    const Outcome dawn = flexpipe(args), exhaustive = flexpipe(args + " --method exhaustive");
    ASSERT_EQ(dawn.exit_code, 0) << limit << dawn.err;
    ASSERT_EQ(exhaustive.exit_code, 0) << limit << exhaustive.err;
    const nlohmann::json d = nlohmann::json::parse(dawn.out), e = nlohmann::json::parse(exhaustive.out);
    EXPECT_TRUE(d["fits"].get<bool>()) << limit;
    EXPECT_TRUE(e["fits"].get<bool>()) << limit;
    EXPECT_EQ(d["rounds"].get<int>(), 1) << limit;
    EXPECT_NEAR(d["bottleneck"].get<double>(), e["bottleneck"].get<double>(), 1e-9 * e["bottleneck"].get<double>())
        << limit;
  }
}

// What `flexpipe capture` wrote for a real U-Net (python/tests/models.py): at a limit where the
// first stage must recompute, and at one where everything is kept, Dawn equals exhaustive search
// and its plan passes the simulation check at once.
TEST_F(DagModel, OnACapturedUNetDawnEqualsExhaustiveSearch) {
  const std::string captured = std::string(FLEXPIPE_TEST_DATA) + "/captured/tiny_unet.graph.json";
  for (const char* limit : {"7e4", "1e5"}) {
    const std::string args =
        "partition --model " + captured + " -p 2 -m 4 --microbatch-size 2 --memory-limit " + limit + " --json";
    const Outcome dawn = flexpipe(args), exhaustive = flexpipe(args + " --method exhaustive");
    ASSERT_EQ(dawn.exit_code, 0) << limit << dawn.err;
    ASSERT_EQ(exhaustive.exit_code, 0) << limit << exhaustive.err;
    const nlohmann::json d = nlohmann::json::parse(dawn.out), e = nlohmann::json::parse(exhaustive.out);
    EXPECT_TRUE(d["fits"].get<bool>()) << limit;
    EXPECT_EQ(d["rounds"].get<int>(), 1) << limit;
    EXPECT_NEAR(d["bottleneck"].get<double>(), e["bottleneck"].get<double>(), 1e-9 * e["bottleneck"].get<double>())
        << limit;
  }
  const Outcome tight =
      flexpipe("partition --model " + captured + " -p 2 -m 4 --microbatch-size 2 --memory-limit 7e4 --json");
  EXPECT_FALSE(nlohmann::json::parse(tight.out)["stages"][0]["recompute"].empty());
}

// search partitions the DAG too: its answer fits, and the program and cost table it writes simulate
// to the makespan it reports.
TEST_F(DagModel, SearchAnswersWithAScheduleThatFitsAndSimulatesToItsMakespan) {
  const std::string program = (dir_ / "best.fps").string(), costs = (dir_ / "best-costs.json").string();
  const Outcome run = flexpipe("search --model " + graph_ + " -p 4 -m 8 --memory-limit 90e6 --threads 1 -q --json -o " +
                               program + " --costs-output " + costs);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json j = nlohmann::json::parse(run.out);
  ASSERT_TRUE(j["found"].get<bool>());
  const nlohmann::json& best = j["best"];
  EXPECT_TRUE(best["fits"].get<bool>());
  for (const auto& peak : best["peak_memory"]) EXPECT_LE(peak.get<double>(), 90e6);
  const Outcome simulated = flexpipe("simulate " + program + " --costs " + costs + " --json");
  ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
  const nlohmann::json s = nlohmann::json::parse(simulated.out);
  EXPECT_DOUBLE_EQ(s["makespan"].get<double>(), best["makespan"].get<double>());
  for (size_t d = 0; d < 4; ++d)
    EXPECT_DOUBLE_EQ(s["devices"][d]["peak_memory"].get<double>(), best["peak_memory"][d].get<double>());
  // The cost table it wrote sends every tensor that crosses a cut, skips included: no cut of this
  // graph sends less than the 8 MB of enc1's output, which crosses every cut after it.
  const nlohmann::json table = nlohmann::json::parse(slurp(costs));
  for (size_t k = 0; k + 1 < table["stages"].size(); ++k)
    EXPECT_GE(table["stages"][k]["output_bytes"].get<double>(), 8 * kMB) << k;
}

}  // namespace
}  // namespace flexpipe::test
