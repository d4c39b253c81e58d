#include "training_options.h"

#include <fmt/format.h>

#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/partition/plan.h"
#include "flexpipe/support/error.h"
#include "flexpipe/train/device.h"
#include "flexpipe/train/rank_env.h"
#include "number_checks.h"

namespace flexpipe::cli {

void add_model_family_options(CLI::App* command, ModelSize& model) {
  command
      ->add_option_function<std::string>(
          "--family", [&model](const std::string& name) { model.family = model_family(name); },
          "gpt (learned positions, LayerNorm, GeLU, biases) or llama (rotary positions, RMSNorm, SwiGLU, no biases) "
          "[gpt]")
      ->check(CLI::IsMember({"gpt", "llama"}));
  command->add_option("--kv-heads", model.kv_heads, "llama: key/value heads, a divisor of --heads [--heads]")
      ->check(whole_number_at_least(1));
}

void add_training_options(CLI::App* command, TrainingCommand& o, const std::string& devices_default) {
  command
      ->add_option("--dp", o.request.data_parallel,
                   fmt::format("Data-parallel copies of the pipeline; the job has copies x devices ranks [{}]",
                               o.request.data_parallel))
      ->check(whole_number_at_least(1));
  command
      ->add_option("-p,--devices", o.schedule.devices,
                   fmt::format("Pipeline devices: the schedule program's parameter p [{}]", devices_default))
      ->check(whole_number_at_least(1));
  command
      ->add_option("-m,--microbatches", o.schedule.microbatches,
                   "Micro-batches per step and pipeline: the schedule program's parameter m [2p for built-ins]")
      ->check(whole_number_at_least(1));
  command
      ->add_option("-v,--chunks", o.schedule.chunks,
                   "Stages per device: the schedule program's parameter v, where it has one [its default]")
      ->check(whole_number_at_least(1));
  command->add_option("-D,--define", o.schedule.defines,
                      "Set any parameter of the schedule's program, built-in or .fps: -D name=value (repeatable)");
  command->add_option("--layers", o.model.layers, fmt::format("Transformer layers [{}]", o.model.layers))
      ->check(whole_number_at_least(1));
  command->add_option("--hidden", o.model.hidden, fmt::format("Hidden size [{}]", o.model.hidden))
      ->check(whole_number_at_least(1));
  command->add_option("--heads", o.model.heads, fmt::format("Attention heads [{}]", o.model.heads))
      ->check(whole_number_at_least(1));
  command->add_option("--vocab", o.model.vocab, fmt::format("Vocabulary size [{}]", o.model.vocab))
      ->check(whole_number_at_least(1));
  command->add_option("--seq-len", o.model.seq_len, fmt::format("Tokens per sequence [{}]", o.model.seq_len))
      ->check(whole_number_at_least(1));
  add_model_family_options(command, o.model);
  command
      ->add_option("--microbatch-size", o.request.training.microbatch_size,
                   fmt::format("Sequences per micro-batch [{}]", o.request.training.microbatch_size))
      ->check(whole_number_at_least(1));
  command->add_option("--partition", o.partition,
                      "Operators per model chunk: ops:N,N,..., layers:N,N,... or a Megatron layout "
                      "[balanced by operator time]");
  command
      ->add_option("--plan", o.plan,
                   "A partition plan (flexpipe partition -o) for this model: its operator ranges, recompute and "
                   "offload decisions")
      ->excludes("--partition");
  command->add_option("--seed", o.request.training.seed,
                      fmt::format("Seed of the weights and the data [{}]", o.request.training.seed));
  command
      ->add_option("--optimizer", o.request.training.optimizer,
                   fmt::format("sgd or adamw [{}]", o.request.training.optimizer))
      ->check(CLI::IsMember({"sgd", "adamw"}));
  command
      ->add_option("--lr", o.request.training.learning_rate,
                   fmt::format("(Peak) learning rate [{:g}]", o.request.training.learning_rate))
      ->check(non_negative_number());
  command
      ->add_option("--weight-decay", o.request.training.weight_decay,
                   fmt::format("Decoupled weight decay [{:g}]", o.request.training.weight_decay))
      ->check(non_negative_number());
  command
      ->add_option("--dtype", o.request.training.dtype,
                   fmt::format("float32 or float64 [{}]", o.request.training.dtype))
      ->check(CLI::IsMember({"float32", "float64"}));
  command->add_option("--device", o.request.device, kDeviceHelp);
  add_quantity_option(command, "--timeout", o.request.timeout_seconds, QuantityKind::Time, QuantityRange::Positive,
                      kSecondsExamples,
                      fmt::format("How long a rank waits for a peer before failing: 90s, 5min or seconds [{:g}s]",
                                  o.request.timeout_seconds));
  command
      ->add_option("--timing-warmup", o.request.timing_warmup,
                   "Steps left out of the timing report at the start, where the allocator and caches warm up [a "
                   "fifth of the steps, at least 1 of 2 or more]")
      ->check(whole_number_at_least(0));
  command->add_option("--trace", o.request.trace_path, "Write the measured last step as a Perfetto trace (rank 0)");
  command->add_option("--svg", o.request.svg_path,
                      "Write the measured last step as an SVG timeline, and the simulated one next to it (rank 0)");
  command->add_flag("--json", o.request.json, "Print the report as JSON (rank 0)");
  command->add_option("--hook", o.hooks,
                      "Run a custom operation kind as a built-in hook: NAME=noop|log|sleep:MS (repeatable)");
}

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
    const bool file = spec.find_first_of("./") != std::string::npos;
    if (!file && options.devices == 0 && !defines_parameter(options, "p")) options.devices = pipeline_ranks;
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

}  // namespace flexpipe::cli
