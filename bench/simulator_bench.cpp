// Simulator throughput (docs/performance.md): a Megatron-style interleaved 1F1B, lowered, with
// the timeline and memory curves recorded or not. The search calls simulate() with recording off.
#include <algorithm>

#include <benchmark/benchmark.h>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

// Megatron-LM's interleaved order (microbatch_group_size_per_vp_stage = p): virtual micro-batch k
// runs chunk (k / p) % v of micro-batch (k / (p v)) p + k % p; rank r warms up with
// 2 (p - r - 1) + (v - 1) p forwards, then alternates one forward and one backward. Needs m % p == 0.
Schedule interleaved_1f1b(int p, int m, int v) {
  Schedule schedule = make_schedule("interleaved-1f1b", p, m, loop_placement(p, p * v));
  const int total = m * v;
  auto microbatch = [&](int k) { return k / (p * v) * p + k % p; };
  auto forward_chunk = [&](int k) { return k / p % v; };
  for (int r = 0; r < p; ++r) {
    auto& list = schedule.device_actions[r];
    auto forward = [&](int k) { list.push_back(Action::make(ActionKind::F, forward_chunk(k) * p + r, microbatch(k))); };
    auto backward = [&](int k) {
      list.push_back(Action::make(ActionKind::B, (v - 1 - forward_chunk(k)) * p + r, microbatch(k)));
    };
    const int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, total);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int i = 0; i < total - warmup; ++i) {
      forward(warmup + i);
      backward(i);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return schedule;
}

void simulate_interleaved(benchmark::State& state, int p, int m) {
  const int v = 2;
  const Schedule schedule = lower(interleaved_1f1b(p, m, v));
  CostTable costs = uniform_costs(p * v, 1, 1, 1, 0.05);
  for (StageCosts& stage : costs.stages) stage.output_bytes = 1;
  costs.link.bandwidth = 100;
  const bool record = state.range(0) != 0;
  const SimOptions options{record, record};
  try {
    for (auto _ : state) {
      SimResult result = simulate(schedule, costs, options);
      benchmark::DoNotOptimize(result.makespan);
    }
  } catch (const Error& error) {
    state.SkipWithError(error.what());
    return;
  }
  state.counters["actions"] = static_cast<double>(schedule.num_actions());
  state.counters["actions/s"] =
      benchmark::Counter(static_cast<double>(schedule.num_actions()) * state.iterations(), benchmark::Counter::kIsRate);
}

// 64 devices x 512 micro-batches x 2 chunks: about 390k actions.
void BM_SimulateInterleaved64x512(benchmark::State& state) { simulate_interleaved(state, 64, 512); }
// A size the search meets in its inner loop: 8 devices x 32 micro-batches.
void BM_SimulateInterleaved8x32(benchmark::State& state) { simulate_interleaved(state, 8, 32); }

BENCHMARK(BM_SimulateInterleaved64x512)->ArgName("record")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SimulateInterleaved8x32)->ArgName("record")->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace flexpipe

BENCHMARK_MAIN();
