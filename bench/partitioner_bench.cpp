// Partitioner speed (docs/performance.md, docs/partitioner.md): DawnPiper-style binary partitioning
// of a 2,000-operator graph into 16 stages (target: under 1 s), with either memory solver, and the
// exact stage solver on one stage.
#include <benchmark/benchmark.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/partition/partitioner.h"
#include "flexpipe/schedules/builtin.h"

namespace flexpipe {
namespace {

// GPT-3 13B's layer shape stacked 133 deep: 2,002 operators; 80 GB per device, where the first
// stages must recompute or offload under 1F1B.
PartitionProblem big_problem(MemorySolver solver) {
  ModelConfig config = find_model("gpt3-13b");
  config.layers = 133;
  const HardwareProfile& h100 = find_hardware("H100-80GB");
  const CostGraph graph = build_model_graph(config, h100);
  PartitionProblem problem =
      make_partition_problem(graph, {1, graph.reference.seq_len}, make_builtin("1f1b", {16, 32, 0}), 80e9,
                             link_bandwidth_per_ms(h100, Interconnect::Pcie));
  problem.solver = solver;
  return problem;
}

void BM_Dawn2000Operators16Stages(benchmark::State& state) {
  const PartitionProblem problem = big_problem(static_cast<MemorySolver>(state.range(0)));
  PartitionResult result;
  for (auto _ : state) result = partition_model(problem, PartitionMethod::Dawn);
  state.counters["operators"] = problem.ops.size();
  state.counters["fits"] = result.fits;
  state.counters["evaluations"] = static_cast<double>(result.evaluations);
  state.SetLabel(memory_solver_name(static_cast<MemorySolver>(state.range(0))));
}
BENCHMARK(BM_Dawn2000Operators16Stages)
    ->Arg(static_cast<int>(MemorySolver::Auto))
    ->Arg(static_cast<int>(MemorySolver::Greedy))
    ->Unit(benchmark::kMillisecond);

void BM_StageSolver(benchmark::State& state) {
  const PartitionProblem problem = big_problem(MemorySolver::Auto);
  StageContext context;
  context.in_flight = problem.in_flight[0];
  context.budget = problem.budget[0] * 0.5;
  context.host_bandwidth = problem.host_bandwidth;
  context.period = 1000;
  const int end = static_cast<int>(state.range(1));
  for (auto _ : state)
    benchmark::DoNotOptimize(
        optimize_stage_memory(problem.ops, 0, end, context, static_cast<MemorySolver>(state.range(0))));
  state.SetLabel(memory_solver_name(static_cast<MemorySolver>(state.range(0))));
}
BENCHMARK(BM_StageSolver)
    ->Args({static_cast<int>(MemorySolver::Exact), 16})
    ->Args({static_cast<int>(MemorySolver::Auto), 16})
    ->Args({static_cast<int>(MemorySolver::Exact), 48})
    ->Args({static_cast<int>(MemorySolver::Greedy), 48})
    ->Args({static_cast<int>(MemorySolver::Greedy), 125})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace flexpipe

BENCHMARK_MAIN();
