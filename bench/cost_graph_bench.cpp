// Building the GPT-3 175B operator graph (1,447 operators) and aggregating one partition into a cost
// table: the step a partition search repeats. Target: under 50 ms together.
#include <benchmark/benchmark.h>

#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/costs/stage_aggregation.h"

namespace {

using namespace flexpipe;

void BuildGpt3_175B(benchmark::State& state) {
  const ModelConfig& config = find_model("gpt3-175b");
  const HardwareProfile& hardware = find_hardware("H100-80GB");
  for (auto _ : state) benchmark::DoNotOptimize(build_model_graph(config, hardware));
}
BENCHMARK(BuildGpt3_175B)->Unit(benchmark::kMillisecond);

void AggregateGpt3_175B(benchmark::State& state) {
  const CostGraph graph = build_model_graph(find_model("gpt3-175b"), find_hardware("H100-80GB"));
  const Partition partition = partition_evenly(graph, 16);
  AggregationOptions options;
  options.shape = {1, 2048};
  options.decisions.assign(graph.nodes.size(), MemoryDecision::Keep);
  for (size_t i = 0; i < graph.nodes.size(); i += 3) options.decisions[i] = MemoryDecision::Recompute;
  for (auto _ : state) benchmark::DoNotOptimize(aggregate_stages(graph, partition, options));
}
BENCHMARK(AggregateGpt3_175B)->Unit(benchmark::kMillisecond);

void BuildAndAggregateGpt3_175B(benchmark::State& state) {
  const ModelConfig& config = find_model("gpt3-175b");
  const HardwareProfile& hardware = find_hardware("H100-80GB");
  AggregationOptions options;
  options.shape = {1, 2048};
  for (auto _ : state) {
    const CostGraph graph = build_model_graph(config, hardware);
    benchmark::DoNotOptimize(aggregate_stages(graph, partition_evenly(graph, 16), options));
  }
}
BENCHMARK(BuildAndAggregateGpt3_175B)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
