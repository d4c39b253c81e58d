// flexpipe run: train schedules for real, one process per pipeline rank. Everything that can be
// checked is checked here, before the runtime is loaded and before any rank talks to another.
#include <fmt/format.h>

#include "flexpipe/core/error.h"
#include "flexpipe/core/trainable_model.h"
#include "flexpipe/runtime/rank_env.h"
#include "options.h"
#include "runtime_loader.h"

namespace flexpipe::cli {

namespace {

struct RunOptions {
  std::vector<std::string> schedules;
  ScheduleOptions schedule;  // -p, -m, -v, -D, --lettering for every schedule
  GptSize model;
  std::string partition;
  runtime::RunRequest request;
  std::vector<std::string> hooks;
  std::string fault;
};

// "RANK:STEP:ACTION[:hang]"
runtime::FaultInjection parse_fault(const std::string& text) {
  runtime::FaultInjection fault;
  int hang = 0;
  char word[8] = {};
  const int fields = std::sscanf(text.c_str(), "%d:%d:%d:%4s", &fault.rank, &fault.step, &fault.action, word);
  if (fields == 4 && std::string(word) == "hang") hang = 1;
  if ((fields != 3 && !(fields == 4 && hang)) || fault.rank < 0 || fault.step < 0 || fault.action < 0)
    throw Error(fmt::format("--fault '{}': expected RANK:STEP:ACTION or RANK:STEP:ACTION:hang", text));
  fault.hang = hang != 0;
  return fault;
}

void run(RunOptions& o, int& exit_code) {
  runtime::RunRequest& request = o.request;
  request.env = runtime::rank_env_from_environment();
  request.model = gpt_config(o.model);
  for (const std::string& hook : o.hooks) {
    const size_t eq = hook.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == hook.size())
      throw Error(fmt::format("--hook '{}': expected NAME=SPEC, e.g. OFFLOAD_KV=sleep:2", hook));
    request.hooks[hook.substr(0, eq)] = hook.substr(eq + 1);
  }
  if (!o.fault.empty()) request.fault = parse_fault(o.fault);
  if (request.training.steps < 1) throw Error(fmt::format("--steps {}: at least one step", request.training.steps));
  const CostGraph graph = trainable_graph(request.model, request.training.microbatch_size);
  for (const std::string& spec : o.schedules) {
    ScheduleOptions options = o.schedule;
    options.spec = spec;
    // A built-in schedule takes its device count from the job; a file fixes its own.
    const bool file = spec.find_first_of("./") != std::string::npos;
    if (!file && options.devices == 0) options.devices = request.env.world_size;
    runtime::ScheduledRun run;
    run.schedule = load_checked_schedule(options);
    if (run.schedule.num_devices != request.env.world_size)
      throw Error(fmt::format("{} runs on {} devices but this job has {} rank{} (WORLD_SIZE); start it with "
                              "`flexpipe launch -n {} -- flexpipe run ...`", spec, run.schedule.num_devices,
                              request.env.world_size, request.env.world_size == 1 ? "" : "s",
                              run.schedule.num_devices));
    const int chunks = run.schedule.stages_per_pipeline;
    try {
      run.partition = o.partition.empty() ? partition_balanced(graph, chunks) : parse_partition(graph, o.partition, chunks);
      check_partition(graph, run.partition);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: partition{}: {}", spec, o.partition.empty() ? "" : " " + o.partition, e.what()));
    }
    request.runs.push_back(std::move(run));
  }
  exit_code = run_runtime(request);
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand(
      "run", "Train a GPT-style model with schedules for real (libtorch + c10d), one process per rank; "
             "start N ranks with `flexpipe launch -n N -- flexpipe run ...`");
  auto o = std::make_shared<RunOptions>();
  command->add_option("schedule", o->schedules,
                      "Built-in schedule names or files (.fps, .csv, .json); several are trained one after another")
      ->required();
  command->add_option("-p,--devices", o->schedule.devices, "Devices of a built-in schedule [WORLD_SIZE]");
  command->add_option("-m,--microbatches", o->schedule.microbatches, "Micro-batches per step [2p]");
  command->add_option("-v,--chunks", o->schedule.chunks, "Stages per device of a built-in schedule [its default]");
  command->add_option("-D,--define", o->schedule.defines, "Set a program parameter: -D name=value (repeatable)");
  command->add_option("--layers", o->model.layers, "Transformer layers [2]")->check(CLI::PositiveNumber);
  command->add_option("--hidden", o->model.hidden, "Hidden size [32]")->check(CLI::PositiveNumber);
  command->add_option("--heads", o->model.heads, "Attention heads [4]")->check(CLI::PositiveNumber);
  command->add_option("--vocab", o->model.vocab, "Vocabulary size [64]")->check(CLI::PositiveNumber);
  command->add_option("--seq-len", o->model.seq_len, "Tokens per sequence [16]")->check(CLI::PositiveNumber);
  command->add_option("--microbatch-size", o->request.training.microbatch_size, "Sequences per micro-batch [2]")
      ->check(CLI::PositiveNumber);
  command->add_option("--partition", o->partition,
                      "Operators per model chunk: ops:N,N,..., layers:N,N,... or a Megatron layout "
                      "[balanced by operator time]");
  command->add_option("--steps", o->request.training.steps, "Training steps [2]");
  command->add_option("--seed", o->request.training.seed, "Seed of the weights and the synthetic data [1234]");
  command->add_option("--optimizer", o->request.training.optimizer, "sgd or adamw [adamw]")
      ->check(CLI::IsMember({"sgd", "adamw"}));
  command->add_option("--lr", o->request.training.learning_rate, "Learning rate [1e-3]")->check(CLI::NonNegativeNumber);
  command->add_option("--weight-decay", o->request.training.weight_decay, "Decoupled weight decay [0]")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--dtype", o->request.training.dtype, "float32 or float64 [float32]")
      ->check(CLI::IsMember({"float32", "float64"}));
  command->add_flag("--verify", o->request.verify,
                    "Also train the model in one process with autograd and compare losses and parameters");
  command->add_option("--tolerance", o->request.tolerance, "Largest relative difference --verify accepts [1e-6]")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--timeout", o->request.timeout_seconds, "Seconds a rank waits for a peer before failing [60]")
      ->check(CLI::PositiveNumber);
  command->add_option("--trace", o->request.trace_path, "Write the measured last step as a Perfetto trace (rank 0)");
  command->add_option("--svg", o->request.svg_path, "Write the measured last step as an SVG timeline (rank 0)");
  command->add_flag("--json", o->request.json, "Print the report as JSON (rank 0)");
  command->add_option("--hook", o->hooks,
                      "Run a custom operation kind as a built-in hook: NAME=noop|log|sleep:MS (repeatable)");
  command->add_option("--fault", o->fault,
                      "Testing: rank RANK dies (or hangs, with :hang) at action ACTION of step STEP: RANK:STEP:ACTION[:hang]");
  command->callback([o, &exit_code] { run(*o, exit_code); });
}

}  // namespace flexpipe::cli
