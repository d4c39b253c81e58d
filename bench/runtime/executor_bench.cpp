// Executor overhead per action, apart from compute and transfers: a tiny model (so that compute is
// small) trained by 1, 2 or 4 ranks as threads over the in-process transport. The counter
// overhead_us_per_action is each action's wall time minus operator/optimizer time, minus the time
// spent posting and waiting for transfers, averaged over actions and ranks.
#include <benchmark/benchmark.h>

#include <thread>

#include <ATen/ATen.h>

#include "executor/executor.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/train/trainable_model.h"

namespace flexpipe::runtime {
namespace {

void BM_ExecutorOverhead(benchmark::State& state, const char* schedule_name) {
  const int ranks = static_cast<int>(state.range(0));
  const int microbatches = 4 * ranks;
  const Schedule schedule = compile_builtin(schedule_name, {ranks, microbatches, 0}).schedule;
  const ModelConfig config = gpt_config({schedule.stages_per_pipeline, 8, 2, 16, 4});
  const ModelPlan plan =
      make_model_plan(config, partition_balanced(trainable_graph(config, 1), schedule.stages_per_pipeline), 1,
                      at::kFloat, 1);
  const std::vector<MicroBatchData> batch = make_batch(plan, microbatches, 0);
  auto transports = make_local_transports(ranks);
  std::vector<std::unique_ptr<Executor>> executors;
  for (int r = 0; r < ranks; ++r)
    executors.push_back(std::make_unique<Executor>(schedule, plan, *transports[r], HookRegistry{}, ExecutorOptions{}));
  double overhead_ns = 0, actions = 0;
  int step = 0;
  for (auto _ : state) {
    std::vector<StepReport> reports(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r) threads.emplace_back([&, r] { reports[r] = executors[r]->run_step(step, batch); });
    for (auto& t : threads) t.join();
    ++step;
    for (const StepReport& report : reports) {
      overhead_ns += double(report.overhead_ns);
      actions += double(report.actions);
    }
  }
  state.counters["overhead_us_per_action"] = overhead_ns / 1e3 / std::max(actions, 1.0);
  state.counters["actions_per_step"] = actions / std::max<double>(1, double(step));
}

BENCHMARK_CAPTURE(BM_ExecutorOverhead, 1f1b, "1f1b")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ExecutorOverhead, zb_v, "zb-v")->Arg(2)->Arg(4)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace flexpipe::runtime

BENCHMARK_MAIN();
