// A training request made ready for the runtime: the environment, device, model and hooks read, every
// schedule loaded and checked against the job's ranks, and each one's partition (or plan) applied.
#include "flexpipe/workflow/training_request.h"

#include <fmt/format.h>

#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/partition/plan.h"
#include "flexpipe/support/error.h"
#include "flexpipe/train/device.h"
#include "flexpipe/train/rank_env.h"
#include "flexpipe/workflow/partition_forms.h"

namespace flexpipe {

void prepare_request(TrainingCommand& o) { prepare_request(o, runtime::rank_env_from_environment()); }

void prepare_request(TrainingCommand& o, const runtime::RankEnv& env) {
  runtime::RunRequest& request = o.request;
  request.env = env;
  runtime::parse_device(request.device);
  request.model = trainable_config(o.model);
  for (const std::string& hook : o.hooks) {
    const size_t eq = hook.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == hook.size())
      throw Error(fmt::format("--hook '{}': expected NAME=SPEC, e.g. OFFLOAD_KV=sleep:2", hook));
    request.hooks[hook.substr(0, eq)] = hook.substr(eq + 1);
  }
  if (request.training.steps < 1) throw Error(fmt::format("--steps {}: at least one step", request.training.steps));
  if (request.data_parallel < 1) throw Error(fmt::format("--dp {}: at least one copy", request.data_parallel));
  if (request.env.world_size % request.data_parallel != 0)
    throw Error(fmt::format("--dp {}: the job's {} ranks do not split into {} equal pipelines", request.data_parallel,
                            request.env.world_size, request.data_parallel));
  const int pipeline_ranks = request.env.world_size / request.data_parallel;
  const bool captured = !request.export_dir.empty();
  const CostGraph graph =
      captured ? request.captured_graph : trainable_graph(request.model, request.training.microbatch_size);
  if (captured && o.plan.empty())
    throw Error(
        fmt::format("--model {}: a captured model trains with the plan it was exported for: add --plan "
                    "PLAN.json (flexpipe partition --model {} ... -o PLAN.json)",
                    o.captured_model, o.captured_model));
  for (const std::string& spec : o.schedules) {
    ScheduleOptions options = o.schedule;
    options.spec = spec;
    // A built-in schedule takes its device count from the job; a file fixes its own.
    if (options.devices == 0 && devices_from_command(options)) options.devices = pipeline_ranks;
    runtime::ScheduledRun run;
    run.schedule = load_checked_schedule(options);
    if (run.schedule.num_devices * request.data_parallel != request.env.world_size)
      throw Error(
          fmt::format("{} runs on {} devices{} but this job has {} rank{} ({}); start it with "
                      "`flexpipe launch -n {} -- flexpipe ...`",
                      spec, run.schedule.num_devices,
                      request.data_parallel > 1 ? fmt::format(" x {} data-parallel copies", request.data_parallel) : "",
                      request.env.world_size, request.env.world_size == 1 ? "" : "s",
                      request.env.launcher == "slurm" ? "SLURM_NTASKS" : "WORLD_SIZE",
                      run.schedule.num_devices * request.data_parallel));
    const int chunks = run.schedule.stages_per_pipeline;
    if (!o.plan.empty()) {
      // The plan's graph must be this model's (flexpipe profile measures it; partition plans it).
      const PartitionPlan plan = load_partition_plan(o.plan);
      if (static_cast<int>(plan.stages.size()) != chunks)
        throw Error(fmt::format("{}: the plan has {} stages but {} has {} model chunks", o.plan, plan.stages.size(),
                                spec, chunks));
      run.partition = plan_partition(plan, graph, o.plan);
      request.memory_decisions = plan_decisions(plan, graph, o.plan);
      request.offload_checkpoints = chunks_that_offload_checkpoints(plan);
      run.schedule = with_plan_memory_actions(plan, run.schedule);
      request.runs.push_back(std::move(run));
      continue;
    }
    try {
      run.partition =
          o.partition.empty() ? partition_balanced(graph, chunks) : parse_partition(graph, o.partition, chunks);
      check_partition(graph, run.partition);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: partition{}: {}", spec, o.partition.empty() ? "" : " " + o.partition, e.what()));
    }
    request.runs.push_back(std::move(run));
  }
}

int pipeline_devices(const TrainRequest& o) {
  ScheduleOptions options = o.command.schedule;
  options.spec = o.schedule;
  if (schedule_source(o.schedule) == ScheduleSource::Auto || devices_from_command(options))
    return o.command.schedule.devices > 0 ? o.command.schedule.devices : kDefaultTrainDevices;
  return load_schedule_spec(options).schedule.num_devices;
}

}  // namespace flexpipe
