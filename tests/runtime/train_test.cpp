// flexpipe train end to end, on real processes it launches itself: the loss falls, a resumed run
// reproduces the uninterrupted one exactly, data parallelism x pipeline equals one process with the
// global batch, text files train, bad flags are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include "../cli/cli_harness.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/support/quantity.h"

namespace flexpipe::test {
namespace {

const std::string kSmall = "--layers 2 --hidden 32 --heads 4 --seq-len 16 --microbatch-size 2";

class Train : public CliHarness {
 protected:
  Train() : CliHarness("flexpipe_train_") {}

  nlohmann::json train_json(const std::string& args) {
    const Outcome run = flexpipe("train " + args + " --json");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return run.exit_code == 0 ? nlohmann::json::parse(run.out)["runs"][0] : nlohmann::json();
  }

  static std::vector<double> losses(const nlohmann::json& run) {
    std::vector<double> result;
    for (const auto& step : run["steps"]) result.push_back(step["loss"].get<double>());
    return result;
  }
};

TEST_F(Train, DefaultsLaunchTheirOwnRanksAndTheLossFalls) {
  const Outcome run = flexpipe("train --steps 40 " + kSmall);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("step    1/40  loss "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("step   40/40  loss "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("tokens/s"), std::string::npos);
  EXPECT_NE(run.out.find("simulated from the mean action times"), std::string::npos);
  EXPECT_NE(run.out.find("rank 1: peak saved activations"), std::string::npos);
  const nlohmann::json report = train_json("--steps 40 " + kSmall);
  const std::vector<double> l = losses(report);
  ASSERT_EQ(l.size(), 40u);
  EXPECT_LT(l.back(), 0.8 * l.front()) << "synthetic sequences are learnable: " << l.front() << " -> " << l.back();
  EXPECT_EQ(report["ranks"].get<int>(), 2);
  EXPECT_GT(report["steps"][39]["grad_norm"].get<double>(), 0);
  EXPECT_NEAR(report["steps"][0]["learning_rate"].get<double>(), 3e-3 / 10, 1e-15);  // warm-up step 1 of 10
}

TEST_F(Train, AResumedRunReproducesTheUninterruptedOneExactly) {
  const std::string common = kSmall + " --schedule zb-h1 --decay-steps 10";
  const std::filesystem::path a = dir_ / "a", b = dir_ / "b";
  const nlohmann::json whole = train_json(common + " --steps 6 --checkpoint " + a.string() + " --save-every 3");
  const nlohmann::json first = train_json(common + " --steps 3 --checkpoint " + b.string());
  const nlohmann::json rest = train_json(common + " --steps 6 --checkpoint " + b.string() + " --resume");
  ASSERT_EQ(rest["first_step"].get<int>(), 3);
  const std::vector<double> all = losses(whole), head = losses(first), tail = losses(rest);
  ASSERT_EQ(head.size(), 3u);
  ASSERT_EQ(tail.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(head[i], all[i]) << "step " << i;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tail[i], all[3 + i]) << "step " << 3 + i;
  // Both runs saved step 6 last: same files, byte for byte.
  for (int rank : {0, 1}) {
    const std::string name = "step-000006/rank-" + std::to_string(rank) + ".bin";
    EXPECT_EQ(slurp(a / name), slurp(b / name)) << name;
  }
  EXPECT_EQ(slurp(a / "latest"), "6\n");
}

TEST_F(Train, ACrashDuringASaveLeavesThePreviousCheckpoint) {
  const std::filesystem::path dir = dir_ / "ckpt";
  train_json(kSmall + " --steps 2 --checkpoint " + dir.string());
  // A save of step 4 that died half-way: one rank's file, and `latest` not moved.
  std::filesystem::create_directories(dir / "step-000004");
  std::ofstream(dir / "step-000004" / "rank-0.bin") << "flexpipe-checkpoint 1\n{\"step\":";
  const nlohmann::json resumed = train_json(kSmall + " --steps 3 --checkpoint " + dir.string() + " --resume");
  EXPECT_EQ(resumed["first_step"].get<int>(), 2);
  // A damaged file that `latest` does point to is refused with its name.
  std::ofstream(dir / "step-000003" / "rank-1.bin", std::ios::app) << "x";
  const Outcome broken = flexpipe("train " + kSmall + " --steps 4 --checkpoint " + dir.string() + " --resume");
  EXPECT_NE(broken.exit_code, 0);
  EXPECT_NE(broken.err.find("step-000003/rank-1.bin: checksum mismatch"), std::string::npos) << broken.err;
  // ... and the previous checkpoint that reads is offered, not loaded behind the user's back.
  EXPECT_NE(broken.err.find("error: rank 1: --resume: the latest checkpoint (step 3) is damaged: "), std::string::npos)
      << broken.err;
  EXPECT_NE(broken.err.find("the previous one, step 2, reads: to resume from it, write 2 into " + dir.string() +
                            "/latest"),
            std::string::npos)
      << broken.err;
  // Taken up as offered, the resume says where it starts, and every save says where it went.
  std::ofstream(dir / "latest") << "2\n";
  const Outcome resumed_text = flexpipe("train " + kSmall + " --steps 3 --checkpoint " + dir.string() + " --resume");
  ASSERT_EQ(resumed_text.exit_code, 0) << resumed_text.err;
  EXPECT_TRUE(
      resumed_text.out.starts_with("resumed from " + (dir / "step-000002").string() + ": step 3 of 3 is next\n"))
      << resumed_text.out;
  EXPECT_NE(resumed_text.out.find("checkpoint: step 3 saved in " + (dir / "step-000003").string() + "\n"),
            std::string::npos)
      << resumed_text.out;
}

TEST_F(Train, ADivergedRunStopsAtTheFirstNonFiniteLossAndFails) {
  const std::filesystem::path dir = dir_ / "ckpt";
  const Outcome run = flexpipe("train " + kSmall + " --steps 20 --lr 1e30 --clip 0 --warmup 0 --checkpoint " +
                               dir.string() + " --save-every 1");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  const size_t at = run.err.find(
      ": training diverged and stops here, without saving this step (lower --lr, or clip "
      "gradients with --clip)\n");
  ASSERT_NE(at, std::string::npos) << run.err;
  // The step it names is the last one run, and the last checkpoint is the step before it.
  const size_t step_at = run.err.rfind("error: step ", at);
  ASSERT_NE(step_at, std::string::npos) << run.err;
  const int step = std::stoi(run.err.substr(step_at + 12));
  EXPECT_LT(step, 20);
  EXPECT_EQ(flexpipe::test::slurp(dir / "latest"), std::to_string(step - 1) + "\n");
  EXPECT_EQ(run.out.find(fmt::format("step {:>4}/20", step + 1)), std::string::npos) << run.out;
}

TEST_F(Train, DataParallelTimesPipelineEqualsOneProcessWithTheGlobalBatch) {
  const nlohmann::json run =
      train_json(kSmall + " --dp 2 --steps 3 --verify --dtype float64 --schedule interleaved-1f1b");
  ASSERT_FALSE(run.is_null());
  EXPECT_EQ(run["ranks"].get<int>(), 4);
  EXPECT_EQ(run["data_parallel"].get<int>(), 2);
  EXPECT_TRUE(run["verify"]["passed"].get<bool>()) << run["verify"].dump();
  EXPECT_LE(run["verify"]["parameter_difference"].get<double>(), 1e-9);
}

// RMSNorm, rotary positions, SwiGLU and 4 query heads on 2 key/value heads, on 3 processes.
TEST_F(Train, LlamaFamilyTrainsExactlyOnRealProcesses) {
  const nlohmann::json run =
      train_json(kSmall + " --family llama --kv-heads 2 --schedule zb-h1 -p 3 --steps 3 --verify --dtype float64");
  ASSERT_FALSE(run.is_null());
  EXPECT_EQ(run["ranks"].get<int>(), 3);
  EXPECT_TRUE(run["verify"]["passed"].get<bool>()) << run["verify"].dump();
  EXPECT_LE(run["verify"]["parameter_difference"].get<double>(), 1e-9);
  // A size the layout cannot have is refused once, before any rank starts.
  const Outcome bad = flexpipe("train " + kSmall + " --family llama --kv-heads 3 --steps 1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err, "error: Llama size: 3 key/value heads do not divide 4 heads\n");
  // profile measures the same layout, operator for operator.
  const std::filesystem::path graph = dir_ / "llama.json";
  const Outcome profile =
      flexpipe("profile " + kSmall + " --family llama --kv-heads 2 --repeats 2 -o " + graph.string());
  ASSERT_EQ(profile.exit_code, 0) << profile.err;
  const nlohmann::json g = nlohmann::json::parse(slurp(graph));
  ASSERT_EQ(g["nodes"].size(), 1u + 2 * 13 + 3);  // word embedding; 13 per block; norm, head, loss
  EXPECT_EQ(g["nodes"][3]["name"], "layer.0.rope");
  EXPECT_EQ(g["nodes"][11]["kind"], "swiglu");
  for (const auto& node : g["nodes"]) EXPECT_GT(node["forward"]["time"].get<double>(), 0) << node["name"];
}

TEST_F(Train, TextFilesTrainAsBytes) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "To be, or not to be, that is the question. ";
  const std::filesystem::path file = write("text.txt", text);
  const nlohmann::json run = train_json(kSmall + " --steps 3 --verify --dtype float64 --data " + file.string());
  ASSERT_FALSE(run.is_null());
  EXPECT_NE(run["data"].get<std::string>().find("byte-level tokens"), std::string::npos);
  EXPECT_TRUE(run["verify"]["passed"].get<bool>());
}

// --device cuda where no GPU can train: one error, exit 2, before any rank trains. Against a libtorch
// without CUDA, that it has none; against one with CUDA (the wheel's) on a machine without a GPU or a
// driver (ours, CI's), that no device is visible.
TEST_F(Train, CudaWithoutAGpuIsOneErrorBeforeAnyRankTrains) {
#ifdef FLEXPIPE_TORCH_CUDA
  if (torch::cuda::device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  const std::string why = std::string(": libtorch ") + TORCH_VERSION +
                          " has CUDA, but no CUDA device is visible to this process (the driver, "
                          "CUDA_VISIBLE_DEVICES)\n";
#else
  const std::string why = std::string(": this runtime is built against libtorch ") + TORCH_VERSION +
                          " without CUDA (CPU only); build FlexPipe against a CUDA libtorch: cmake "
                          "-DFLEXPIPE_PYTHON=<a Python whose torch has CUDA> (docs/runtime.md, \"Devices\")\n";
#endif
  // Two ranks: the launcher checks once, as rank 0, which takes the GPU of its LOCAL_RANK.
  Outcome run = flexpipe("train --steps 1 " + kSmall + " --device cuda");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "error: --device cuda (cuda:0)" + why);
  EXPECT_EQ(run.out, "");
  // One rank trains in this process and says so.
  run = flexpipe("train -p 1 --steps 1 --warmup 0 " + kSmall + " --device cuda:1");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "error: rank 0: --device cuda:1" + why);
  run = flexpipe("profile " + kSmall + " --device cuda:0");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "error: --device cuda:0" + why);
  // auto profiles on the training device: refused before it measures anything, with the one error.
  run = flexpipe("train --schedule auto --steps 1 " + kSmall + " --device cuda");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "error: --device cuda (cuda:0)" + why);
  // cpu is what runs without the option.
  run = flexpipe("train -p 1 --steps 1 --warmup 0 " + kSmall + " --device cpu");
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

TEST_F(Train, ProfileWritesACostGraphTheSimulatorReads) {
  const std::filesystem::path graph = dir_ / "measured.json";
  const Outcome profile = flexpipe("profile " + kSmall + " --repeats 3 -o " + graph.string());
  ASSERT_EQ(profile.exit_code, 0) << profile.err;
  EXPECT_NE(profile.out.find("head.loss"), std::string::npos) << profile.out;
  const nlohmann::json g = nlohmann::json::parse(slurp(graph));
  ASSERT_EQ(g["nodes"].size(), 30u);
  for (const auto& node : g["nodes"]) EXPECT_GT(node["forward"]["time"].get<double>(), 0) << node["name"];
  // qkv saves its input: 2 sequences x 16 tokens x 32 floats = 4096 bytes, 128 per token.
  EXPECT_EQ(g["nodes"][4]["name"], "layer.0.qkv");
  EXPECT_DOUBLE_EQ(g["nodes"][4]["saved_bytes"]["per_token"].get<double>(), 128);
  // The scores' passes hold at least one attention map beyond what they keep: 4 heads x 16 x 16 floats
  // per sequence, 16 bytes per token and key.
  EXPECT_EQ(g["nodes"][5]["name"], "layer.0.scores");
  EXPECT_GE(g["nodes"][5]["workspace_bytes"]["per_token_seq"].get<double>(), 16);
  // The softmax and P V save the same probabilities: measured as shared, once.
  EXPECT_EQ(g["nodes"][6]["name"], "layer.0.softmax");
  EXPECT_EQ(g["nodes"][7]["name"], "layer.0.attention_v");
  EXPECT_DOUBLE_EQ(g["nodes"][7]["shared_saved_bytes"]["per_token_seq"].get<double>(), 16);
  EXPECT_EQ(g["nodes"][7]["shared_saved_bytes"], g["nodes"][6]["saved_bytes"]);
  EXPECT_NE(profile.out.find("workspace"), std::string::npos);
  const Outcome simulate = flexpipe("simulate zb-h1 -p 2 --model " + graph.string() + " --microbatch-size 2 --json");
  ASSERT_EQ(simulate.exit_code, 0) << simulate.err;
  EXPECT_GT(nlohmann::json::parse(simulate.out)["makespan"].get<double>(), 0);
}

// Evaluates a cost graph's byte polynomial (a bare number, or its terms) at the graph's reference shape.
double bytes_at_reference(const nlohmann::json& g, const nlohmann::json& bytes) {
  if (bytes.is_number()) return bytes.get<double>();
  const double b = g["reference"]["microbatch_size"].get<double>(), s = g["reference"]["seq_len"].get<double>();
  return bytes.value("fixed", 0.0) + bytes.value("per_sample", 0.0) * b + bytes.value("per_token", 0.0) * b * s +
         bytes.value("per_token_seq", 0.0) * b * s * s;
}

TEST_F(Train, ProfileMeasuresTheTransportAsTheGraphsLink) {
  const std::filesystem::path graph = dir_ / "measured.json";
  const Outcome profile = flexpipe("profile " + kSmall + " --repeats 1 --transport -o " + graph.string());
  ASSERT_EQ(profile.exit_code, 0) << profile.err;
  const nlohmann::json g = nlohmann::json::parse(slurp(graph));
  // One row per size: 4 bytes, eight times more each row, up to the largest tensor between operators.
  double largest = 0;
  for (const auto& edge : g["edges"]) largest = std::max(largest, bytes_at_reference(g, edge["bytes"]));
  ASSERT_GT(largest, 4);
  std::vector<double> sizes;
  for (double bytes = 4; bytes < largest; bytes *= 8) sizes.push_back(bytes);
  sizes.push_back(largest);
  size_t from = profile.out.find("transport: Gloo over loopback");
  ASSERT_NE(from, std::string::npos) << profile.out;
  for (double bytes : sizes) {
    from = profile.out.find(fmt::format("\n{:>12.0f} ", bytes), from);
    EXPECT_NE(from, std::string::npos) << bytes << " bytes:\n" << profile.out;
  }
  // The graph stores the link the table's fit printed, field for field (a rate with no limit is
  // "unlimited" on screen and absent from the file).
  const CostGraph stored = load_cost_graph(graph.string());
  ASSERT_TRUE(stored.link) << g.dump();
  const Link& link = *stored.link;
  auto rate = [](double bytes_per_ms) {
    return std::isfinite(bytes_per_ms) ? format_bytes(bytes_per_ms * 1e3) + "/s" : std::string("unlimited");
  };
  EXPECT_NE(profile.out.find(fmt::format("\nlink: latency {:.4f} ms, bandwidth {}; host time per message {:.4f} ms "
                                         "to send, {:.4f} ms to receive, copying at {}; a message sent before its "
                                         "receive arrives {:.4f} ms after the receive is posted\n",
                                         link.latency, rate(link.bandwidth), link.send_cpu, link.receive_cpu,
                                         rate(link.cpu_bandwidth), link.rendezvous)),
            std::string::npos)
      << profile.out;
  // Without --transport, no link: the graph says nothing it did not measure.
  const Outcome operators_only = flexpipe("profile " + kSmall + " --repeats 1 --json");
  ASSERT_EQ(operators_only.exit_code, 0) << operators_only.err;
  EXPECT_FALSE(nlohmann::json::parse(operators_only.out).contains("link"));
}

TEST_F(Train, AutoTrainsTheFastestScheduleSimulatedWithTheProfile) {
  const std::filesystem::path graph = dir_ / "profile.json";
  const Outcome first = flexpipe("train --schedule auto --profile " + graph.string() + " --steps 2 " + kSmall);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const size_t at = first.out.find("; chose ");
  ASSERT_NE(at, std::string::npos) << first.out;
  const std::string chosen = first.out.substr(at + 8, first.out.find('\n', at) - at - 8);
  // A built-in by name, or the search's own program written next to the profile.
  const bool program = chosen.ends_with(".fps");
  if (program) {
    EXPECT_TRUE(std::filesystem::exists(chosen));
  }
  EXPECT_NE(first.out.find("\n" + (program ? std::string("search") : chosen) + ": 2 ranks"), std::string::npos)
      << first.out;
  // The profile was kept; a second run reads it instead of measuring again, and chooses the same.
  const std::string measured = slurp(graph);
  ASSERT_FALSE(measured.empty());
  // The ranks about to start are this machine's: the profile measured their transport too.
  EXPECT_TRUE(nlohmann::json::parse(measured).contains("link"));
  const Outcome second = flexpipe("train --schedule auto --profile " + graph.string() + " --steps 1 " + kSmall);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(slurp(graph), measured);
  EXPECT_NE(second.out.find("; chose " + chosen + "\n"), std::string::npos) << second.out;
  // The search's program only where it is predicted --auto-margin (5%) faster than the fastest built-in.
  const size_t builtin_at = first.out.find("fastest built-in ");
  ASSERT_NE(builtin_at, std::string::npos) << first.out;
  char builtin[64];
  double builtin_ms = 0, best_ms = 0;
  ASSERT_EQ(std::sscanf(first.out.c_str() + builtin_at, "fastest built-in %63s %lf ms, best %lf ms", builtin,
                        &builtin_ms, &best_ms),
            3)
      << first.out;
  if (program) {
    EXPECT_LE(best_ms, 0.95 * builtin_ms + 0.005) << first.out;  // the line rounds to 0.01 ms
  } else if (best_ms < builtin_ms) {
    EXPECT_NE(first.out.find(", less than --auto-margin 5% faster; chose " + std::string(builtin) + "\n"),
              std::string::npos)
        << first.out;
  }
  // No program is predicted twice as fast as every built-in here: a margin of 1 trains the built-in.
  const Outcome built_in =
      flexpipe("train --schedule auto --auto-margin 1 --profile " + graph.string() + " --steps 1 " + kSmall);
  ASSERT_EQ(built_in.exit_code, 0) << built_in.err;
  EXPECT_NE(built_in.out.find("chose " + std::string(builtin) + "\n"), std::string::npos) << built_in.out;
  EXPECT_NE(built_in.out.find("\n" + std::string(builtin) + ": 2 ranks"), std::string::npos) << built_in.out;
}

// On three devices the search's answer (a built-in or its own program) trains exactly like the
// single-process reference, and was not slower in simulation than any built-in. The margin is given,
// so that a machine with fewer cores than ranks trains the search's answer too.
TEST_F(Train, AutoTrainsTheSearchAnswerExactly) {
  const std::filesystem::path graph = dir_ / "profile.json";
  const Outcome run = flexpipe("train --schedule auto --auto-margin 0.05 -p 3 -m 6 --profile " + graph.string() +
                               " --steps 2 --layers 6 --hidden 32 --heads 2 --seq-len 16 --dtype float64 --verify");
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const size_t at = run.out.find("fastest built-in ");
  ASSERT_NE(at, std::string::npos) << run.out;
  const std::string line = run.out.substr(at, run.out.find('\n', at) - at);
  double builtin = 0, best = 0;
  char name[64];
  ASSERT_EQ(std::sscanf(line.c_str(), "fastest built-in %63s %lf ms, best %lf ms", name, &builtin, &best), 3) << line;
  EXPECT_LE(best, builtin);
  EXPECT_NE(run.out.find("): exact"), std::string::npos) << run.out;
  // The margin given is the one used, however many cores the machine has.
  EXPECT_EQ(line.find("share this machine's"), std::string::npos) << line;
}

// Three ranks on fewer cores: the predicted steps are lower estimates that differ by schedule, so
// auto trains the fastest built-in and says why (machines with a core per rank skip this).
TEST_F(Train, AutoOnMoreRanksThanCoresTrainsTheFastestBuiltIn) {
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores == 0 || cores >= 3) GTEST_SKIP() << "needs fewer cores than 3 ranks; this machine has " << cores;
  const Outcome run = flexpipe("train --schedule auto -p 3 -m 6 --steps 1 --warmup 0 " + kSmall);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const size_t at = run.out.find("fastest built-in ");
  ASSERT_NE(at, std::string::npos) << run.out;
  const std::string line = run.out.substr(at, run.out.find('\n', at) - at);
  char builtin[64];
  ASSERT_EQ(std::sscanf(line.c_str(), "fastest built-in %63s", builtin), 1) << line;
  const bool search_faster = line.find("best") != std::string::npos && line.find("(built-in ") == std::string::npos;
  if (search_faster) {
    EXPECT_NE(line.find(fmt::format("(3 ranks share this machine's {} cores: the predicted steps are lower estimates "
                                    "whose error differs by schedule, so the fastest built-in; --auto-margin "
                                    "overrides)",
                                    cores)),
              std::string::npos)
        << line;
  }
  EXPECT_TRUE(line.ends_with(std::string("; chose ") + builtin)) << line;
}

TEST_F(Train, TheSharedCorpusTrainsWhenPresent) {
  const std::string corpus = std::string(FLEXPIPE_TEST_DATA) + "/../../../shared/data/tinyshakespeare.txt";
  if (!std::filesystem::exists(corpus)) GTEST_SKIP() << "no corpus at " << corpus;
  const nlohmann::json run = train_json(kSmall + " --steps 30 --data " + corpus);
  ASSERT_FALSE(run.is_null());
  const std::vector<double> l = losses(run);
  EXPECT_NEAR(l.front(), std::log(256.0), 0.2);  // bytes start near uniform
  EXPECT_LT(l.back(), l.front() - 1.0);
}

// profile -> partition -> train: the plan's operator ranges and its recompute or offload decisions
// run on real ranks, and training still equals the single-process reference.
TEST_F(Train, PartitionPlansTrainExactlyWithTheirRecomputeAndOffloadDecisions) {
  const std::filesystem::path graph = dir_ / "profile.json", plan = dir_ / "plan.json";
  ASSERT_EQ(flexpipe("profile " + kSmall + " --repeats 1 -o " + graph.string()).exit_code, 0);
  // GPipe holds all 4 micro-batches on both stages: saving memory pays everywhere.
  const std::string partition =
      "partition --model " + graph.string() + " --schedule gpipe --microbatch-size 2 -p 2 -m 4 --json";
  const Outcome free = flexpipe(partition + " --memory-limit 1e12");
  ASSERT_EQ(free.exit_code, 0) << free.err;
  // The mean stage's need with everything kept: a memory-balanced cut alone cannot reach much below it.
  double mean = 0;
  const nlohmann::json unlimited = nlohmann::json::parse(free.out);
  for (const auto& stage : unlimited["stages"]) mean += stage["memory"].get<double>() / 2;
  // Without a host link the plan must recompute. With one (PCIe), Dawn still prefers recompute here
  // (rebuilt one segment at a time it saves more than the copies offloading leaves on the device), so
  // the offload case takes vPipe's plan, which swaps whole layers first when the transfers hide.
  // Measured workspaces vary between profiles: the first limit that needs decisions and fits.
  for (const auto& [host, key] :
       {std::pair{" --host-bandwidth 0", "recompute"}, std::pair{" --method vpipe", "offload"}}) {
    size_t decided = 0;
    std::string last;
    for (double factor : {0.9, 0.95, 0.85, 0.8}) {
      const Outcome tight =
          flexpipe(partition + host + " --memory-limit " + std::to_string(factor * mean) + " -o " + plan.string());
      last = tight.out + tight.err;
      if (tight.exit_code != 0) continue;
      decided = 0;
      const nlohmann::json made = nlohmann::json::parse(tight.out);
      for (const auto& stage : made["stages"]) decided += stage[key].size();
      if (decided > 0) break;
    }
    ASSERT_GT(decided, 0u) << key << ": " << last;
    const nlohmann::json run =
        train_json(kSmall + " --schedule gpipe -p 2 -m 4 --steps 2 --verify --dtype float64 --plan " + plan.string());
    ASSERT_FALSE(run.is_null());
    EXPECT_TRUE(run["verify"]["passed"].get<bool>()) << key;
    if (std::string(key) != "recompute") continue;
    // The same plan with its checkpoints offloaded: OFFLOAD moves them, RELOAD brings them back right
    // before R, and training is still exact.
    nlohmann::json offloading = nlohmann::json::parse(slurp(plan));
    for (auto& stage : offloading["stages"]) stage["offload_checkpoints"] = !stage["recompute"].empty();
    const std::filesystem::path moved = write("plan-offloading-checkpoints.json", offloading.dump(2));
    const nlohmann::json again =
        train_json(kSmall + " --schedule gpipe -p 2 -m 4 --steps 2 --verify --dtype float64 --plan " + moved.string());
    ASSERT_FALSE(again.is_null());
    EXPECT_TRUE(again["verify"]["passed"].get<bool>());
  }
  // A plan for another model is refused before any rank starts.
  const Outcome other =
      flexpipe("train --layers 3 --hidden 32 --heads 4 --seq-len 16 --steps 1 --plan " + plan.string());
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_NE(other.err.find("the plan was made for"), std::string::npos) << other.err;
}

TEST_F(Train, AScheduleFileWithMoreStagesThanDevicesCutsTheModelToMatch) {
  // PyTorch's looped zero-bubble CSV: 4 stages on 2 ranks.
  const nlohmann::json run = train_json(kSmall + " --steps 2 --verify --dtype float64 --schedule " +
                                        std::string(FLEXPIPE_TEST_DATA) + "/pytorch/loop_zb_2rank_4stage_compute.csv");
  ASSERT_FALSE(run.is_null());
  EXPECT_EQ(run["stages"].get<int>(), 4);
  EXPECT_EQ(run["ranks"].get<int>(), 2);
  EXPECT_TRUE(run["verify"]["passed"].get<bool>());
}

TEST_F(Train, BadFlagsAreOneClearError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--data /nonexistent.txt", "error: --data /nonexistent.txt: no such file\n"},
      {"--resume", "error: --resume needs --checkpoint DIR\n"},
      {"--resume --checkpoint " + (dir_ / "empty").string(), "holds no complete checkpoint"},
      {"--schedule nope", "error: unknown schedule 'nope'"},
      {"--dp 0", "--dp: must be a whole number of at least 1, got 0"},
      {"--schedule auto --partition ops:40,41",
       "error: --schedule auto chooses the partition itself: drop --partition / --plan\n"},
      {"--profile " + (dir_ / "x.json").string(), ""},  // harmless without auto: trains
  };
  for (const auto& [args, message] : cases) {
    const Outcome run = flexpipe("train " + kSmall + " --steps 2 " + args);
    if (message.empty()) {
      EXPECT_EQ(run.exit_code, 0) << args << ": " << run.err;
      continue;
    }
    EXPECT_NE(run.exit_code, 0) << args;
    EXPECT_NE(run.err.find(message), std::string::npos) << args << ": " << run.err;
  }
  const Outcome profile = flexpipe("profile --repeats 0");
  EXPECT_EQ(profile.exit_code, 2);
  EXPECT_NE(profile.err.find("--repeats"), std::string::npos) << profile.err;
}

}  // namespace
}  // namespace flexpipe::test
