// flexpipe partition: a plan that simulate reads back to the same figures, the largest micro-batch,
// the answer when nothing fits, and one clear error for bad input.
#include <nlohmann/json.hpp>

#include "cli_harness.h"
#include "sanitized.h"

namespace flexpipe::test {
namespace {

class Partition : public CliHarness {
 protected:
  Partition() : CliHarness("flexpipe_partition_") {}
  static constexpr const char* kModel = "partition --model gpt3-2.7b -p 4 -m 8 --memory-limit 80e9";

  // `simulate --plan` (1F1B, 4 devices, 8 micro-batches) gives the step time and peaks the plan reports.
  void expect_simulation_reproduces(const std::string& plan, const nlohmann::json& p, double limit) {
    const Outcome simulated = flexpipe("simulate 1f1b -p 4 -m 8 --plan " + plan + " --json");
    ASSERT_EQ(simulated.exit_code, 0) << simulated.err;
    const nlohmann::json s = nlohmann::json::parse(simulated.out);
    EXPECT_DOUBLE_EQ(s["makespan"].get<double>(), p["step_time"].get<double>());
    for (size_t d = 0; d < 4; ++d) {
      EXPECT_DOUBLE_EQ(s["devices"][d]["peak_memory"].get<double>(), p["peak_memory"][d].get<double>());
      EXPECT_LE(s["devices"][d]["peak_memory"].get<double>(), limit);
    }
  }
};

TEST_F(Partition, APlanSimulatesToWhatThePartitionerReported) {
  const std::string plan = (dir_ / "plan.json").string();
  const Outcome made = flexpipe(std::string(kModel) + " --microbatch-size 6 -o " + plan);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_NE(made.out.find("wrote " + plan), std::string::npos);
  const nlohmann::json p = nlohmann::json::parse(slurp(plan));
  EXPECT_EQ(p["format"], "flexpipe-partition-plan");
  EXPECT_TRUE(p["fits"].get<bool>());
  int operators = 0, recomputed = 0;
  for (const auto& stage : p["stages"]) {
    operators += stage["operators"].get<int>();
    recomputed += static_cast<int>(stage["recompute"].size());
    EXPECT_LE(stage["memory"].get<double>(), 80e9);
  }
  EXPECT_EQ(operators, p["graph_operators"].get<int>());
  EXPECT_GT(recomputed, 0);  // micro-batch 6 does not fit without
  expect_simulation_reproduces(plan, p, 80e9);
}

// Under a tight limit the first stage, which holds four micro-batches, offloads its recompute
// checkpoints: the plan says so, and simulate (with RELOAD right before each R there) reproduces the
// partitioner's figures.
TEST_F(Partition, APlanThatOffloadsCheckpointsSimulatesToWhatThePartitionerReported) {
  const std::string plan = (dir_ / "plan.json").string();
  const Outcome made =
      flexpipe("partition --model gpt3-1.3b -p 4 -m 8 --memory-limit 12e9 --microbatch-size 2 -o " + plan);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  EXPECT_NE(made.out.find("0+ckpt"), std::string::npos) << made.out;
  const nlohmann::json p = nlohmann::json::parse(slurp(plan));
  ASSERT_TRUE(p["fits"].get<bool>());
  EXPECT_TRUE(p["stages"][0]["offload_checkpoints"].get<bool>());
  EXPECT_GT(p["stages"][0]["checkpoint_bytes"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(p["stages"][0]["offload_bytes"].get<double>(), p["stages"][0]["checkpoint_bytes"].get<double>());
  expect_simulation_reproduces(plan, p, 12e9);
  // The flag is a boolean.
  nlohmann::json wrong = p;
  wrong["stages"][0]["offload_checkpoints"] = "yes";
  const auto bad = write("flag.json", wrong.dump(2));
  const Outcome refused = flexpipe("simulate 1f1b -p 4 -m 8 --plan " + bad.string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find(bad.string() + ": stages[0].offload_checkpoints: must be true or false"),
            std::string::npos)
      << refused.err;
}

TEST_F(Partition, MaxBatchBeatsTheBaselinesThatDoNotOptimizeMemory) {
  if (test::kSanitized)
    GTEST_SKIP() << "15 s under the sanitizer (three max-batch searches); the Release run checks it";
  auto largest = [&](const char* method) {
    // Capped at 16, which Dawn and vPipe both reach (58 and 50 uncapped); PipeDream fits 2. A
    // higher cap costs Dawn's search seconds under the sanitizer.
    const Outcome run = flexpipe(std::string(kModel) + " --max-batch --max-batch-limit 16 --json --method " + method);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return nlohmann::json::parse(run.out)["max_microbatch_size"].get<int>();
  };
  const int dawn = largest("dawn"), pipedream = largest("pipedream"), vpipe = largest("vpipe");
  EXPECT_GE(pipedream, 1);
  EXPECT_GE(dawn, 4 * pipedream);
  EXPECT_GE(dawn, vpipe);
  const Outcome compare = flexpipe(std::string(kModel) + " --compare");
  ASSERT_EQ(compare.exit_code, 0) << compare.err;
  for (const char* method : {"uniform", "params", "pipedream", "vpipe", "dawn"})
    EXPECT_NE(compare.out.find(method), std::string::npos) << compare.out;
  EXPECT_NE(compare.out.find("\nmax b: the largest micro-batch that fits (with --max-batch); b: the micro-batch "
                             "planned; bottleneck: the slowest stage's time per micro-batch; step: the simulated "
                             "step; peak: the fullest device's memory\n"),
            std::string::npos)
      << compare.out;
}

// Every column of the plan's table has a unit or a legend line, and sizes come in the limit's units.
TEST_F(Partition, TheTableSaysWhatEachColumnIsInTheLimitsUnits) {
  const Outcome run = flexpipe("partition --model gpt3-1.3b -p 4 -m 8 --memory-limit 16GiB -q");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("limit 16.00 GiB per device\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\nops: operators; k: micro-batches held at once; compute: F + B per micro-batch, in ms; "
                         "+recomp, +offload: what recompute and offload add to it; time: the sum\n"
                         "memory: the stage's peak; R: operators recomputed; O: operators offloaded (+ckpt: the "
                         "recompute checkpoints too)\nsimulated peak memory per device: 15.80 GiB, "),
            std::string::npos)
      << run.out;
}

// Without --memory-limit the limit is the --hardware profile's memory, and the report says where it came from.
TEST_F(Partition, WithoutAMemoryLimitTheHardwaresMemoryIsTheLimit) {
  const Outcome run = flexpipe("partition --model gpt3-1.3b -p 4 -m 8 -q");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.substr(0, run.out.find('\n')),
            "gpt3-1.3b on 4 devices (H100-80GB), 1f1b with m=8, micro-batch 1, sequence 2048, limit 80.00 GB per "
            "device (the memory of H100-80GB: no --memory-limit)");
  // The plan is the one --memory-limit 80e9 makes (80 GB, the profile's memory as its datasheet gives it).
  const Outcome json = flexpipe("partition --model gpt3-1.3b -p 4 -m 8 -q --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json plan = nlohmann::json::parse(json.out);
  EXPECT_EQ(plan["memory_limit"].get<double>(), 80e9);
  nlohmann::json given = nlohmann::json::parse(flexpipe("partition --model gpt3-1.3b -p 4 -m 8 -q --json "
                                                        "--memory-limit 80e9")
                                                   .out);
  plan.erase("partition_seconds");  // the planner's own time
  given.erase("partition_seconds");
  EXPECT_EQ(plan, given);
  const Outcome h200 = flexpipe("partition --model gpt3-1.3b -p 4 -m 8 -q --hardware H200-141GB --compare");
  ASSERT_EQ(h200.exit_code, 0) << h200.err;
  EXPECT_EQ(h200.out.substr(0, h200.out.find('\n')),
            "gpt3-1.3b on 4 devices, 1f1b, limit 141.00 GB per device (the memory of H200-141GB: no --memory-limit)");
  // Given, the limit is said as before.
  const Outcome limited = flexpipe("partition --model gpt3-1.3b -p 4 -m 8 -q --memory-limit 16GiB");
  EXPECT_EQ(limited.out.substr(0, limited.out.find('\n')),
            "gpt3-1.3b on 4 devices (H100-80GB), 1f1b with m=8, micro-batch 1, sequence 2048, limit 16.00 GiB per "
            "device");
}

TEST_F(Partition, AModelThatCannotFitSaysByHowMuch) {
  if (test::kSanitized)
    GTEST_SKIP() << "18 s under the sanitizer (gpt3-175b on 8 devices, three times); the Release run checks it";
  const Outcome run = flexpipe("partition --model gpt3-175b -p 8 --memory-limit 80e9");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.out.find("does not fit 8 devices with 80.00 GB each"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("GB more even with every recompute and offload"), std::string::npos) << run.out;
  // At micro-batch 1 under 1f1b neither a smaller micro-batch nor 1f1b is advice.
  EXPECT_NE(run.out.find("the method allows; try more devices or a faster host link\n"), std::string::npos) << run.out;
  const Outcome gpipe =
      flexpipe("partition --model gpt3-175b -p 8 --memory-limit 80e9 --schedule gpipe --microbatch-size 2");
  EXPECT_NE(gpipe.out.find("the method allows; try more devices, a smaller micro-batch, a schedule that holds fewer "
                           "micro-batches (1f1b) or a faster host link\n"),
            std::string::npos)
      << gpipe.out;
  const Outcome written =
      flexpipe("partition --model gpt3-175b -p 8 --memory-limit 80e9 -o " + (dir_ / "p.json").string());
  EXPECT_EQ(written.exit_code, 2);
  EXPECT_NE(written.err.find("no plan written"), std::string::npos) << written.err;
}

// Past its time budget (reading the model included) the partitioner answers with the best plan it
// has found, and says so; -q keeps stderr free of progress lines.
TEST_F(Partition, AnswersWithTheBestPlanFoundWithinItsTimeBudget) {
  const Outcome run =
      flexpipe("partition --model gpt3-1.3b -p 4 -m 8 --memory-limit 12e9 --time-budget 1e-9 -q --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  const nlohmann::json plan = nlohmann::json::parse(run.out);
  EXPECT_TRUE(plan["fits"].get<bool>());
  EXPECT_TRUE(plan["time_budget_reached"].get<bool>());
  const nlohmann::json full =
      nlohmann::json::parse(flexpipe("partition --model gpt3-1.3b -p 4 -m 8 --memory-limit 12e9 -q --json").out);
  EXPECT_FALSE(full.contains("time_budget_reached"));
  EXPECT_LE(full["bottleneck"].get<double>(), plan["bottleneck"].get<double>());
  const Outcome text = flexpipe("partition --model gpt3-1.3b -p 4 -m 8 --memory-limit 12e9 --time-budget 1e-9 -q");
  EXPECT_NE(text.out.find("time budget reached: the best plan found by then"), std::string::npos) << text.out;
  EXPECT_EQ(flexpipe("partition --model gpt3-1.3b --memory-limit 12e9 --time-budget 0").exit_code, 2);
}

TEST_F(Partition, BadInputIsOneClearError) {
  const Outcome limit = flexpipe("partition --model gpt3-1.3b --memory-limit 0");
  EXPECT_EQ(limit.exit_code, 2);
  EXPECT_EQ(limit.err,
            "error: --memory-limit: '0' is not a positive size; write 80GiB, 85.9GB or 85899345920 (see flexpipe "
            "partition --help)\n");
  const Outcome method = flexpipe("partition --model gpt3-1.3b --memory-limit 1e9 --method magic");
  EXPECT_EQ(method.exit_code, 2);
  EXPECT_NE(method.err.find("--method"), std::string::npos) << method.err;
  const Outcome exhaustive = flexpipe("partition --model gpt3-1.3b --memory-limit 1e9 --method exhaustive");
  EXPECT_EQ(exhaustive.exit_code, 2);
  EXPECT_NE(exhaustive.err.find("exhaustive search is for graphs of up to 40 operators"), std::string::npos)
      << exhaustive.err;
  const auto bad = write("bad.json", "{\n  \"format\": \"flexpipe-partition-plan\",\n  \"version\": 1,\n  oops\n}\n");
  const Outcome syntax = flexpipe("simulate 1f1b --plan " + bad.string());
  EXPECT_EQ(syntax.exit_code, 2);
  EXPECT_NE(syntax.err.find(bad.string() + ":4:3:"), std::string::npos) << syntax.err;
  // A plan naming an operator the model does not have.
  const std::string plan = (dir_ / "plan.json").string();
  ASSERT_EQ(flexpipe(std::string(kModel) + " --microbatch-size 6 -o " + plan).exit_code, 0);
  nlohmann::json p = nlohmann::json::parse(slurp(plan));
  p["stages"][0]["recompute"].push_back("layer.99.qkv");
  const auto wrong = write("wrong.json", p.dump(2));
  const Outcome unknown = flexpipe("simulate 1f1b -p 4 -m 8 --plan " + wrong.string());
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find(wrong.string() +
                             ": stages[0].recompute: 'layer.99.qkv' is not an operator of 'gpt3-2.7b'"),
            std::string::npos)
      << unknown.err;
  // A schedule with another number of stages than the plan.
  const Outcome stages = flexpipe("simulate 1f1b -p 2 --plan " + plan);
  EXPECT_EQ(stages.exit_code, 2);
  EXPECT_NE(stages.err.find("the plan has 4 stages but the schedule '1f1b' has 2 per pipeline"), std::string::npos)
      << stages.err;
}

}  // namespace
}  // namespace flexpipe::test
