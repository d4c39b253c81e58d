// Drives `flexpipe model` and `flexpipe simulate --model`: exit codes, messages and files written.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_harness.h"
#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/interop/cost_graph_json.h"

namespace {

namespace fs = std::filesystem;
using flexpipe::test::Outcome;

class ModelCli : public flexpipe::test::CliHarness {
 protected:
  ModelCli() : CliHarness("flexpipe_model_cli_") {}
};

TEST_F(ModelCli, ListShowsEveryModelWithItsSize) {
  const Outcome run = flexpipe("model list");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("mixtral-8x7b           46.70B     12.88B"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("llama2-7b               6.74B      6.74B"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("deepseek-moe-16b"), std::string::npos);
}

TEST_F(ModelCli, ListJsonHasEveryModelOfTheTable) {
  const Outcome text = flexpipe("model list");
  const Outcome run = flexpipe("model list --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json models = nlohmann::json::parse(run.out);
  ASSERT_TRUE(models.is_array());
  EXPECT_EQ(models.size() + 1, static_cast<size_t>(std::count(text.out.begin(), text.out.end(), '\n')));
  for (const nlohmann::json& model : models) {
    EXPECT_NE(text.out.find(model["name"].get<std::string>() + " "), std::string::npos) << model;
    EXPECT_GE(model["parameters"].get<double>(), model["active_parameters"].get<double>()) << model;
  }
  const auto mixtral =
      std::find_if(models.begin(), models.end(), [](const auto& m) { return m["name"] == "mixtral-8x7b"; });
  ASSERT_NE(mixtral, models.end());
  EXPECT_NEAR((*mixtral)["parameters"].get<double>(), 46.70e9, 0.01e9);
  EXPECT_NEAR((*mixtral)["active_parameters"].get<double>(), 12.88e9, 0.01e9);
  EXPECT_EQ((*mixtral)["layers"], 32);
}

// Output in the input's units: a model's costs print ms and bytes, in GiB when the limit was written so;
// a unit-less table prints bare numbers, its limit of 8 as 8.
TEST_F(ModelCli, SimulatePrintsInTheUnitsOfItsInput) {
  const Outcome model = flexpipe("simulate 1f1b -p 2 -m 4 --model gpt3-1.3b --memory-limit 80GiB");
  ASSERT_EQ(model.exit_code, 0) << model.err;
  EXPECT_EQ(model.out,
            "schedule 1f1b: 2 devices, 4 micro-batches, 2 stages (time in ms, memory in bytes)\n"
            "makespan 171.9 ms, bubble 22.1%, lower bound 139.9 ms, efficiency 81.4%\n"
            "communication 8 transfers, volume 64.00 MiB; memory fits\n"
            "device      busy      idle  peak memory  peak time  static memory   capacity  fits\n"
            "d0      127.9 ms  44.06 ms    21.30 GiB   12.91 ms      10.60 GiB  80.00 GiB   yes\n"
            "d1      139.9 ms     32 ms    16.67 GiB   12.93 ms      10.54 GiB  80.00 GiB   yes\n");
  const Outcome decimal = flexpipe("simulate 1f1b -p 2 -m 4 --model gpt3-1.3b --memory-limit 85.9e9");
  EXPECT_NE(decimal.out.find("     22.87 GB   12.91 ms       11.38 GB  85.90 GB   yes\n"), std::string::npos)
      << decimal.out;
  const Outcome unitless = flexpipe("simulate 1f1b -p 2 -m 4 --uniform-costs 1,1,1 --memory-limit 8");
  EXPECT_NE(unitless.out.find("d0        12     3            2          1              0         8   yes\n"),
            std::string::npos)
      << unitless.out;
}

TEST_F(ModelCli, ShowJsonHasTotalAndActiveParameters) {
  const Outcome run = flexpipe("model show mixtral-8x7b --json --layers");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_NEAR(report["parameters"].get<double>(), 46.70e9, 0.01e9);
  EXPECT_NEAR(report["active_parameters"].get<double>(), 12.88e9, 0.01e9);
  EXPECT_EQ(report["layers"].size(), 34u);  // embedding, 32 layers, head
  EXPECT_EQ(report["layers"][1]["role"], "transformer");
  EXPECT_EQ(report["hardware"], "H100-80GB");
}

TEST_F(ModelCli, ShowListsOperatorsOrLayers) {
  const Outcome operators = flexpipe("model show gpt3-1.3b --hardware a100-80gb --seq-len 1024");
  ASSERT_EQ(operators.exit_code, 0) << operators.err;
  EXPECT_NE(operators.out.find("micro-batch 1, sequence 1024, on A100-80GB"), std::string::npos) << operators.out;
  EXPECT_NE(operators.out.find("layer.23.attention_v"), std::string::npos);
  const Outcome layers = flexpipe("model show gpt3-1.3b --layers");
  EXPECT_NE(layers.out.find("\nhead "), std::string::npos) << layers.out;
  EXPECT_EQ(layers.out.find("attention_v"), std::string::npos);
}

// Llama's P V product saves the softmax's probabilities too: the operator row says so, and the
// layer row holds them once.
TEST_F(ModelCli, ShowCountsSharedSavedTensorsOncePerLayer) {
  const Outcome operators = flexpipe("model show llama2-7b --json");
  ASSERT_EQ(operators.exit_code, 0) << operators.err;
  const Outcome layers = flexpipe("model show llama2-7b --json --layers");
  ASSERT_EQ(layers.exit_code, 0) << layers.err;
  double saved = 0, shared = 0;
  const nlohmann::json nodes = nlohmann::json::parse(operators.out)["nodes"];
  for (const auto& node : nodes)
    if (node["name"].get<std::string>().starts_with("layer.0.")) {
      saved += node["saved_bytes"].get<double>();
      shared += node.value("shared_saved_bytes", 0.0);
    }
  // 32 heads x 4096^2 positions x 2 bytes.
  EXPECT_EQ(shared, 32.0 * 4096 * 4096 * 2);
  EXPECT_EQ(nlohmann::json::parse(layers.out)["layers"][1]["saved_bytes"].get<double>(), saved - shared);
}

TEST_F(ModelCli, ExportWritesAGraphThatReadsBack) {
  const fs::path file = dir_ / "llama.json";
  const Outcome run = flexpipe("model export llama2-7b --flash-attention -o " + file.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const flexpipe::CostGraph graph = flexpipe::load_cost_graph(file.string());
  EXPECT_EQ(flexpipe::total_parameters(graph), 6738415616.0);
  EXPECT_GE(flexpipe::find_node(graph, "layer.0.flash_attention"), 0);
  const Outcome shown = flexpipe("model show " + file.string() + " --json");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(nlohmann::json::parse(shown.out)["parameters"].get<double>(), 6738415616.0);
}

TEST_F(ModelCli, SimulateAggregatesTheModel) {
  const Outcome run = flexpipe("simulate 1f1b -p 4 -m 8 --model gpt3-1.3b --partition \"Et*5|t*6|t*6|t*7L\" --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["time_unit"], "ms") << run.out;
  const Outcome layers = flexpipe("simulate 1f1b -p 4 -m 8 --model gpt3-1.3b --partition layers:6,6,6,8 --json");
  ASSERT_EQ(layers.exit_code, 0) << layers.err;
  EXPECT_EQ(nlohmann::json::parse(layers.out)["makespan"], report["makespan"]);
  const Outcome even = flexpipe("simulate gpipe -p 2 -m 4 --model llama2-7b --microbatch-size 2 --seq-len 1024");
  EXPECT_EQ(even.exit_code, 0) << even.err;
}

// A profiled graph brings the link its transport was measured as: GPipe with one micro-batch on two
// devices crosses it twice on its critical path (the activation, then its gradient), so a latency of
// 1 ms adds 2 ms, and half a millisecond of host time at each SEND one more.
TEST_F(ModelCli, SimulateUsesTheLinkAMeasuredGraphCarries) {
  auto makespan = [&](const std::string& name, const std::string& link) {
    const fs::path file =
        write(name, R"({"format": "flexpipe-cost-graph", "version": 1, "time_unit": "ms", )" + link +
                        R"("nodes": [{"name": "a", "scaling": {"rule": "power"}, "forward": {"time": 2},
                   "backward_input": {"time": 1}, "backward_weight": {"time": 1}},
                  {"name": "b", "scaling": {"rule": "power"}, "forward": {"time": 2},
                   "backward_input": {"time": 1}, "backward_weight": {"time": 1}}],
                 "edges": [{"from": "a", "to": "b", "bytes": 1000}]})");
    const Outcome run = flexpipe("simulate gpipe -p 2 -m 1 --json --model " + file.string());
    EXPECT_EQ(run.exit_code, 0) << run.err;
    return nlohmann::json::parse(run.out)["makespan"].get<double>();
  };
  const double free = makespan("free.json", "");
  EXPECT_DOUBLE_EQ(free, 2 + 2 + 2 + 2);
  EXPECT_DOUBLE_EQ(makespan("latency.json", R"("link": {"latency": 1}, )"), free + 2);
  EXPECT_DOUBLE_EQ(makespan("host.json", R"("link": {"latency": 1, "send_cpu": 0.5}, )"), free + 3);
}

// H200: 989 TFLOP/s and 4.8 TB/s at the peak, half of each predicted. A matmul measured at exactly the
// prediction, and a GeLU memory-bound at a fifth of the bandwidth.
TEST_F(ModelCli, CompareSetsMeasuredPassesAgainstAHardwareProfile) {
  flexpipe::CostGraph graph;
  graph.name = "measured";
  graph.reference = {1, 1};
  auto add = [&](const std::string& name, double time, double flops, double bytes) {
    flexpipe::OperatorNode node;
    node.name = name;
    node.scaling.rule = flexpipe::ScalingRule::Power;
    node.forward = {time, flexpipe::fixed_amount(flops), flexpipe::fixed_amount(bytes)};
    graph.nodes.push_back(node);
  };
  add("matmul", 0.004, 1.978e9, 4.8e6);  // 0.002 ms of FLOPs at the peak, 0.001 ms of bytes
  add("gelu", 0.05, 9.89e6, 4.8e7);      // 0.00001 ms of FLOPs, 0.01 ms of bytes
  const fs::path file = write("measured.json", flexpipe::cost_graph_to_json(graph));
  const Outcome run = flexpipe("model compare " + file.string() + " --hardware h200-141gb --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json out = nlohmann::json::parse(run.out);
  EXPECT_EQ(out["hardware"], "H200-141GB");
  ASSERT_EQ(out["passes"].size(), 2u);
  EXPECT_EQ(out["passes"][0]["bound"], "compute");
  EXPECT_NEAR(out["passes"][0]["predicted"].get<double>(), 0.004, 1e-15);
  EXPECT_NEAR(out["passes"][0]["achieved"].get<double>(), 0.5, 1e-12);
  EXPECT_EQ(out["passes"][1]["bound"], "memory");
  EXPECT_NEAR(out["passes"][1]["predicted"].get<double>(), 0.02, 1e-15);
  EXPECT_NEAR(out["compute_efficiency"].get<double>(), 0.5, 1e-12);
  EXPECT_NEAR(out["memory_efficiency"].get<double>(), 0.2, 1e-12);
  EXPECT_EQ(out["off"], 1);
  EXPECT_EQ(out["passes"][0]["off"], false);
  EXPECT_EQ(out["passes"][1]["off"], true);
  const Outcome text = flexpipe("model compare " + file.string() + " --hardware H200-141GB");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("1 of 2 passes differ from the prediction by more than 20% of the measured time"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("compute-bound passes 50%, memory-bound passes 20% (the profile: 50%)"), std::string::npos)
      << text.out;
  const Outcome unknown = flexpipe("model compare " + file.string() + " --hardware H300");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err, "error: unknown hardware 'H300' (known: A100-80GB, H100-80GB, H200-141GB)\n");
}

TEST_F(ModelCli, ErrorsAreExact) {
  Outcome run = flexpipe("simulate 1f1b -p 4 -m 8 --model gpt3-1.3b --partition \"Et*5|t*6|t*6|t*6L\"");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err,
            "error: pipeline layout, character 17: expected 't' (a transformer layer, layer 'layer.23' comes next in "
            "'gpt3-1.3b'), got 'L'\n  Et*5|t*6|t*6|t*6L\n                  ^\n");
  run = flexpipe("simulate 1f1b -p 4 -m 8 --model gpt3-1.3b --partition layers:13,13");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "error: --partition makes 2 stages but the schedule has 4\n");
  run = flexpipe("simulate 1f1b -p 4 -m 8 --model gpt3-1.3b --partition layers:13,x");
  EXPECT_EQ(run.err, "error: --partition layers:: 'x' is not a count (field 2)\n");
  run = flexpipe("model show gpt5");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err.rfind("error: unknown model 'gpt5' (known: gpt3-1.3b, ", 0), 0u) << run.err;
  run = flexpipe("model show gpt3-1.3b --hardware tpu");
  EXPECT_EQ(run.err, "error: unknown hardware 'tpu' (known: A100-80GB, H100-80GB, H200-141GB)\n");
  const fs::path broken = dir_ / "broken.json";
  std::ofstream(broken) << "{\"format\": \"flexpipe-cost-graph\",\n \"version\": 1,\n \"nodes\": [}\n";
  run = flexpipe("model show " + broken.string());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err,
            "error: " + broken.string() +
                ":3:12: invalid JSON: syntax error while parsing value - unexpected '}'; expected '[', '{', or "
                "a literal\n");
}

}  // namespace
