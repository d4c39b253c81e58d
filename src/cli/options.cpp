// The options several subcommands share (a schedule, a model and its shape, costs; run's and train's
// model, batch and optimizer), read into the workflow's structs, and the progress line search and partition print.
#include "options.h"

#include <optional>
#include <string>

#include <fmt/format.h>

#include "number_checks.h"

namespace flexpipe::cli {

namespace {

// An empty --partition (a shell variable that was not set) once meant no partition at all, in silence.
CLI::Validator partition_given() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.find_first_not_of(" \t") != std::string::npos) return "";
        return "empty; give ops:N,N,..., layers:N,N,... or a Megatron layout, or leave the option out";
      },
      "");
}

// The ranks wait in whole milliseconds: a shorter timeout (1ns) became a wait of 0 ms, every wait a
// failure.
CLI::Validator at_least_a_millisecond() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::optional<Quantity> q = parse_quantity(text, QuantityKind::Time);
        if (!q || q->value >= 1e-3) return "";
        return fmt::format("'{}' is shorter than 1ms, the shortest wait a rank keeps; write {}", text,
                           kSecondsExamples);
      },
      "");
}

}  // namespace

void add_schedule_options(CLI::App* command, ScheduleOptions& options) {
  command
      ->add_option("schedule", options.spec,
                   "Built-in schedule name (see `flexpipe schedules`) or a file (.fps program, .csv, .json)")
      ->required();
  command->add_option("-p,--devices", options.devices, "Devices: the program's parameter p, built-in or .fps [4]")
      ->check(whole_number_at_least(1));
  command
      ->add_option("-m,--microbatches", options.microbatches,
                   "Micro-batches: the program's parameter m [the program's default; 2p for built-ins]")
      ->check(whole_number_at_least(1));
  command
      ->add_option("-v,--chunks", options.chunks,
                   "Stages per device: the program's parameter v, for the schedules that have one [its default]")
      ->check(whole_number_at_least(1));
  command->add_option("-D,--define", options.defines,
                      "Set any program parameter, built-in or .fps: -D name=value (repeatable; `flexpipe params` "
                      "lists them)");
  command
      ->add_option("--lettering", options.lettering, "PyTorch CSV lettering: detect, current (I, B) or legacy (B, BW)")
      ->check(CLI::IsMember(csv_letterings()));
}

void add_cost_options(CLI::App* command, CostOptions& options) {
  auto* file = command->add_option("--costs", options.costs_file, "Stage cost table (JSON, docs/cost-table.md)");
  command
      ->add_option("--uniform-costs", options.uniform,
                   "F,I,W[,COMM]: every stage takes F, I, W (B = I + W); 1 memory unit per micro-batch in flight")
      ->excludes(file);
  add_quantity_option(command, "--memory-limit", options.memory_limit, QuantityKind::Size, QuantityRange::Positive,
                      kTableMemoryExamples,
                      "Memory of every device, overriding the table's: 80GiB, 85.9GB, or a bare number in the table's "
                      "memory unit (bytes for --model)");
  auto* model =
      command->add_option("--model", options.model.model,
                          "Aggregate the stage costs from a model: zoo name (flexpipe model list) or cost-graph file");
  model->excludes(file);
  command
      ->add_option("--partition", options.partition,
                   "With --model: Megatron layout (\"Et*3|(tt|)*29,m|L\"), layers:N,N,... or ops:N,N,... [even]")
      ->needs(model)
      ->check(partition_given());
  add_model_shape_options(command, options.model);
  auto* nodes = command
                    ->add_option("--devices-per-node", options.devices_per_node,
                                 "Two-level topology: devices d and e share a node when d / N = e / N; the table's "
                                 "link is then the link within a node [the table's]")
                    ->check(whole_number_at_least(1));
  command
      ->add_option("--inter-node-link", options.inter_node_link,
                   "LATENCY[,BANDWIDTH]: the link between devices of different nodes, in the table's units "
                   "(bandwidth in bytes per time unit; unlimited when left out)")
      ->needs(nodes);
}

void add_model_shape_options(CLI::App* command, NamedModel& options) {
  command
      ->add_option("--hardware", options.hardware,
                   "Hardware profile timing a zoo model: A100-80GB, H100-80GB, H200-141GB")
      ->capture_default_str();
  command->add_option("--microbatch-size", options.microbatch_size, "Micro-batch size [1]")->check(positive_number());
  command->add_option("--seq-len", options.seq_len, "Sequence length [the model's]")->check(positive_number());
  command->add_flag("--flash-attention", options.flash_attention,
                    "Zoo models with fused attention (no s^2 activations)");
}

void print_progress_line(std::chrono::steady_clock::time_point start, const std::string& text) {
  fmt::print(stderr, "[{:6.2f} s] {}\n",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), text);
}

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
  command
      ->add_option("--partition", o.partition,
                   "Operators per model chunk: ops:N,N,..., layers:N,N,... or a Megatron layout "
                   "[balanced by operator time]")
      ->check(partition_given());
  command
      ->add_option("--plan", o.plan,
                   "A partition plan (flexpipe partition -o) for this model: its operator ranges, recompute and "
                   "offload decisions [a captured --model: partitioned by default, GRAPH.plan.json]")
      ->excludes("--partition");
  command->add_option("--seed", o.request.training.seed,
                      fmt::format("Seed of the weights, the synthetic data and dropout (a captured --model's weights "
                                  "are its factory's after torch.manual_seed(0); the seed draws its dropout masks and "
                                  "synthetic data) [{}]",
                                  o.request.training.seed));
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
                      fmt::format("How long a rank waits for a peer before failing: 90s, 5min or seconds; at least "
                                  "1ms, shorter is refused [{:g}s]",
                                  o.request.timeout_seconds))
      ->check(at_least_a_millisecond());
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

}  // namespace flexpipe::cli
