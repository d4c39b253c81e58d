// flexpipe train: the main job. Trains a GPT-style model with pipeline parallelism (and data
// parallelism) on a text file or on synthetic data, with AdamW, warm-up and cosine decay and global
// gradient clipping; prints a progress line per step and, at the end, measured against simulated
// step time and memory per rank; saves and resumes checkpoints. Started without a job around it,
// it launches its own local ranks.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include <unistd.h>

#include "export_stamp.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/lang/writer.h"
#include "flexpipe/partition/plan.h"
#include "flexpipe/search/search.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/train/rank_env.h"
#include "launcher.h"
#include "number_checks.h"
#include "python_package.h"
#include "runtime_loader.h"
#include "training_options.h"

namespace flexpipe::cli {

namespace {

struct TrainOptions {
  TrainingCommand command;
  std::string schedule = "1f1b";
  std::string profile;  // measured cost graph for --schedule auto: read if it exists, else written
  // The least predicted gain over the fastest built-in for which --schedule auto trains the search's
  // own program rather than that built-in (docs/fidelity.md).
  double auto_margin = 0.05;
  bool auto_margin_given = false;
  std::string export_tolerance;  // passed to the export of a captured --model; empty: its own
};

constexpr int kDefaultDevices = 2;

bool is_file(const std::string& spec) { return spec.find_first_of("./") != std::string::npos; }

// A built-in schedule runs on --devices (default 2); -D p=N, or a file, makes the program say.
int pipeline_devices(const TrainOptions& o) {
  const bool p_defined = defines_parameter(o.command.schedule, "p");
  if (o.schedule == "auto" || (!is_file(o.schedule) && !p_defined))
    return o.command.schedule.devices > 0 ? o.command.schedule.devices : kDefaultDevices;
  ScheduleOptions options = o.command.schedule;
  options.spec = o.schedule;
  return load_schedule_spec(options).schedule.num_devices;
}

TrainOptions defaults() {
  TrainOptions o;
  o.command.model = ModelSize{4, 64, 4, 64, 64};
  runtime::TrainingOptions& t = o.command.request.training;
  t.steps = 100;
  t.microbatch_size = 4;
  t.learning_rate = 3e-3;
  t.weight_decay = 0.01;
  t.lr_schedule = true;
  t.warmup_steps = 10;
  t.max_grad_norm = 1.0;
  o.command.request.progress = true;
  return o;
}

// A program fixes its own devices, micro-batches and chunks: the -p / -m / -v the search was given
// leave the command line the ranks run.
void drop_schedule_shape(TrainOptions& o, std::vector<std::string>& command_line) {
  o.command.schedule.devices = o.command.schedule.microbatches = o.command.schedule.chunks = 0;
  std::vector<std::string> kept;
  for (size_t i = 0; i < command_line.size(); ++i) {
    const std::string& arg = command_line[i];
    bool dropped = false;
    for (const char* name : {"-p", "--devices", "-m", "--microbatches", "-v", "--chunks"}) {
      const std::string flag = name;
      if (arg == flag) {
        ++i;  // and its value
        dropped = true;
      } else if (arg.starts_with(flag + "=") || (flag.size() == 2 && arg.size() > 2 && arg.starts_with(flag) &&
                                                 std::isdigit(static_cast<unsigned char>(arg[2])))) {
        dropped = true;
      }
      if (dropped) break;
    }
    if (!dropped) kept.push_back(arg);
  }
  command_line = std::move(kept);
}

// Where --schedule auto writes what it chose for a captured model, next to its graph:
// GRAPH.auto-plan.json, GRAPH.auto-schedule.fps (GRAPH without its .json).
std::string auto_path(const std::string& captured_model, const std::string& what) {
  return std::filesystem::path(captured_model).replace_extension("").string() + ".auto-" + what;
}

void check_captured_for_search(const CostGraph& graph, const std::string& path) {
  if (!graph.capture)
    throw Error(
        fmt::format("--model {}: not a captured model (no capture record): write one with `flexpipe "
                    "capture FILE.py:FACTORY --input SHAPE -o {}`",
                    path, path));
  if (graph.capture->repeats == 0)
    throw Error(
        fmt::format("--schedule auto: {} holds no operator times (its capture record says 0 repeats), so every "
                    "schedule would look alike: capture it with `flexpipe capture` (which times every operator), "
                    "or name a schedule",
                    path));
}

// Whether the model has BatchNorm, whose running statistics every training forward moves.
bool updates_running_statistics(const CostGraph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(),
                     [](const OperatorNode& node) { return node.kind.starts_with("batchnorm"); });
}

// The search's partition as a plan for the export (docs/partition-plan.md): every operator kept, since
// host memory is not what the search is asked to save here.
PartitionPlan searched_plan(const SearchProblem& problem, const ScheduleCandidateReport& best, const std::string& model,
                            const std::string& schedule, int microbatches) {
  const CostGraph& graph = problem.graph;
  PartitionPlan plan;
  plan.model = model;
  plan.graph = graph.name;
  plan.graph_operators = static_cast<int>(graph.nodes.size());
  plan.hardware = graph.hardware ? graph.hardware->name : "cpu";
  plan.schedule = schedule;
  plan.devices = problem.devices;
  plan.microbatches = microbatches;
  plan.chunks = best.partition.num_stages / problem.devices;
  plan.shape = graph.reference;
  plan.memory_limit = 0;
  plan.host_bandwidth = 0;
  plan.method = "search";
  int begin = 0;
  for (int k = 0; k < best.partition.num_stages; ++k) {
    PlannedStage stage;
    while (begin + stage.operators < plan.graph_operators && best.partition.stage_of_node[begin + stage.operators] == k)
      ++stage.operators;
    stage.report = {{"first", graph.nodes[begin].name}, {"last", graph.nodes[begin + stage.operators - 1].name}};
    begin += stage.operators;
    plan.stages.push_back(std::move(stage));
  }
  plan.summary = {{"step_time", best.makespan}, {"family", best.family}};
  return plan;
}

// --schedule auto: measure the model (or read the measurements), search the schedule space with them
// (flexpipe search, docs/search.md) and train the answer: a built-in by name, or the search's program
// written next to the profile. A captured model is searched with the times its capture measured, and
// the partition found becomes the plan its export is cut by (written next to the graph). Done before any rank starts;
// inside a job every rank searches for itself, so the search stops on a count of simulations, not on time, and gives
// every rank the same. Returns 0, or the exit code of a profile that failed (its error printed already).
int choose_schedule(TrainOptions& o, std::vector<std::string>& command_line) {
  const bool in_job = runtime::in_launched_job();
  const bool cached = !o.profile.empty() && std::filesystem::exists(o.profile);
  const std::string& captured = o.command.captured_model;
  if (!o.command.partition.empty() || !o.command.plan.empty())
    throw Error("--schedule auto chooses the partition itself: drop --partition / --plan");
  if (!captured.empty() && in_job)
    throw Error(fmt::format(
        "--schedule auto for a captured model is chosen once, before any rank starts: run `flexpipe train "
        "--model {} --schedule auto ...` without a launcher around it (it starts its own ranks), then give a job "
        "the plan and schedule it wrote (--plan {}, --schedule {})",
        captured, auto_path(captured, "plan.json"), auto_path(captured, "schedule.fps")));
  if (!captured.empty() && !o.profile.empty())
    throw Error(
        "--profile is for the built-in model; a captured model is searched with the times its capture measured");
  if (captured.empty() && in_job && !cached)
    throw Error(
        "--schedule auto inside a job that is already launched needs --profile FILE (an existing "
        "`flexpipe profile` output), so that every rank chooses from the same measurements");
  const runtime::TrainingOptions& t = o.command.request.training;
  std::string path = captured.empty() ? o.profile : captured;
  if (captured.empty() && !cached) {
    const ModelConfig model = trainable_config(o.command.model);
    runtime::ProfileRequest profile;
    profile.model = model;
    profile.microbatch_size = t.microbatch_size;
    profile.dtype = t.dtype;
    profile.seed = t.seed;
    profile.device = o.command.request.device;  // measured where it trains; checked before it measures
    if (path.empty())
      path = (std::filesystem::temp_directory_path() / fmt::format("flexpipe-profile-{}.json", ::getpid())).string();
    profile.output = path;
    profile.quiet = true;  // the table is not for the training log
    // Not in a job: the ranks about to start are this machine's, and talk over loopback.
    profile.transport_port = free_tcp_port();
    if (const int code = profile_runtime(profile); code != 0) return code;
  }
  SearchProblem problem;
  problem.graph = load_cost_graph(path);
  if (captured.empty() && o.profile.empty()) std::filesystem::remove(path);
  if (!captured.empty()) check_captured_for_search(problem.graph, captured);
  problem.devices = pipeline_devices(o);
  const int microbatches = o.command.schedule.microbatches > 0 ? o.command.schedule.microbatches : 2 * problem.devices;
  problem.batches = {{microbatches, problem.graph.reference.microbatch_size}};
  problem.seq_len = problem.graph.reference.seq_len;
  problem.aggregation.parameter_bytes = problem.aggregation.gradient_bytes = t.dtype == "float64" ? 8 : 4;
  problem.aggregation.optimizer_bytes = 2 * problem.aggregation.parameter_bytes;
  problem.memory_choices = false;  // host memory: nothing to recompute or offload for
  if (problem.graph.link) problem.aggregation.device_link = *problem.graph.link;
  // DualPipe's two pipelines would each move BatchNorm's running statistics with half the step's
  // micro-batches, so the trained statistics would not be one process's: not searched for such a model.
  const bool keeps_statistics = !captured.empty() && updates_running_statistics(problem.graph);
  if (keeps_statistics) problem.bidirectional = false;
  SearchOptions options;
  options.threads = 1;
  options.time_budget = 120;  // a backstop: the count below ends the search
  options.max_evaluations = 20000;
  options.exact = false;  // seconds of branch and bound on every rank's start, for small instances only
  const SearchResult result = search_schedules(problem, options);
  if (!result.found) throw Error(fmt::format("--schedule auto: {}", result.infeasible));
  const ScheduleCandidateReport* builtin = fastest_builtin(result);
  // Inside a launched job every rank chooses alone, and nodes with other core counts would disagree:
  // the rule for ranks that share cores is the launcher's, whose ranks are all on this machine.
  const unsigned cores = std::thread::hardware_concurrency();
  const int local_ranks = pipeline_devices(o) * o.command.request.data_parallel;
  const double margin =
      in_job ? o.auto_margin : training_margin(o.auto_margin, o.auto_margin_given, local_ranks, cores);
  const bool cores_shared = margin != o.auto_margin;
  const ScheduleCandidateReport& best = answer_to_train(result, margin);
  const bool within_margin = &best != &result.best;
  std::string chosen = best.name;
  if (best.name == "search") {
    const std::filesystem::path base =
        !captured.empty()   ? std::filesystem::path(auto_path(captured, "schedule"))
        : o.profile.empty() ? std::filesystem::temp_directory_path() / fmt::format("flexpipe-auto-{}", ::getpid())
                            : std::filesystem::path(o.profile).replace_extension("");
    chosen = base.string() + (captured.empty() ? "-schedule.fps" : ".fps");
    write_text_file(chosen, fmt::format("# train --schedule auto: {}\n", best.family) + write_program(best.schedule));
  }
  if (!in_job || runtime::rank_env_from_environment().rank == 0) {
    fmt::print(
        "auto: searched {} schedules with measured operator times ({}): fastest built-in {} {:.2f} ms, best "
        "{:.2f} ms ({}){}; chose {}{}\n",
        result.evaluated, problem.graph.name, builtin ? builtin->name : "none", builtin ? builtin->makespan : kInfinity,
        result.best.makespan, result.best.family,
        !within_margin ? ""
        : cores_shared
            ? fmt::format(" ({} ranks share this machine's {} cores: the predicted steps are lower estimates whose "
                          "error differs by schedule, so the fastest built-in; --auto-margin overrides)",
                          local_ranks, cores)
            : fmt::format(", less than --auto-margin {:g}% faster", 100 * o.auto_margin),
        chosen,
        keeps_statistics ? " (not DualPipe: its two pipelines would split BatchNorm's running statistics)" : "");
    std::fflush(stdout);  // before the ranks print theirs
  }
  o.schedule = chosen;
  for (size_t i = 0; i + 1 < command_line.size(); ++i)
    if (command_line[i] == "--schedule" && command_line[i + 1] == "auto") command_line[i + 1] = chosen;
  for (std::string& arg : command_line)
    if (arg == "--schedule=auto") arg = "--schedule=" + chosen;
  if (captured.empty()) {
    std::vector<int> sizes(best.partition.num_stages, 0);
    for (int k : best.partition.stage_of_node) ++sizes[k];
    std::string partition = "ops:";
    for (size_t k = 0; k < sizes.size(); ++k) partition += fmt::format("{}{}", k ? "," : "", sizes[k]);
    o.command.partition = partition;
    command_line.push_back("--partition");
    command_line.push_back(partition);
  } else {
    // The export cuts the model where the plan says: the search's partition becomes a plan file.
    const std::string plan_path = auto_path(captured, "plan.json");
    write_text_file(plan_path, partition_plan_to_json(searched_plan(problem, best, captured, chosen, microbatches)));
    o.command.plan = plan_path;
    command_line.push_back("--plan");
    command_line.push_back(plan_path);
  }
  if (best.name == "search") drop_schedule_shape(o, command_line);
  return 0;
}

// train --model GRAPH.json: the captured model's graph, and its export for the plan, made here
// (once, before any rank starts) unless this process is a rank of a job, which finds it made.
// Returns 0, or the failed export's exit code.
int prepare_captured_model(TrainOptions& o, bool launcher) {
  runtime::RunRequest& request = o.command.request;
  const std::string& model = o.command.captured_model;
  request.captured_graph = load_cost_graph(model);
  if (!request.captured_graph.capture)
    throw Error(
        fmt::format("--model {}: not a captured model (no capture record): write one with `flexpipe "
                    "capture FILE.py:FACTORY --input SHAPE -o {}`",
                    model, model));
  if (o.command.plan.empty())
    throw Error(
        fmt::format("--model {}: a captured model trains with the plan it is cut by: add --plan PLAN.json "
                    "(flexpipe partition --model {} -p P -m M -o PLAN.json)",
                    model, model));
  if (request.export_dir.empty())
    request.export_dir = std::filesystem::path(model).replace_extension(".export").string();
  if (!launcher) return 0;
  const std::string stamp = export_stamp(model, request.captured_graph, o.command.plan, request.training.dtype);
  if (export_is_current(request.export_dir, stamp)) {
    fmt::print(stderr, "{}: made from this graph, plan, dtype and model source already: not exported again\n",
               request.export_dir);
    return 0;
  }
  forget_export_stamp(request.export_dir);
  std::vector<std::string> arguments = {"export", model, "--plan", o.command.plan, "-o", request.export_dir};
  if (request.training.dtype == "float64") arguments.insert(arguments.end(), {"--dtype", "float64"});
  if (!o.export_tolerance.empty()) arguments.insert(arguments.end(), {"--export-tolerance", o.export_tolerance});
  // The export names what is wrong itself (one error line); its exit code is the command's.
  const int code = run_python_package(arguments);
  if (code == 0) write_export_stamp(request.export_dir, stamp);
  return code;
}

// A warm-up longer than the run is allowed (a short trial of a long run's settings) but said: the rate
// never reaches --lr and never decays.
void warn_if_warmup_outlasts_run(const runtime::TrainingOptions& t) {
  if (!t.lr_schedule || t.warmup_steps <= t.steps) return;
  fmt::print(stderr,
             "warning: --warmup {} is longer than the run ({} steps): the learning rate only rises, to {:.3g} ({}% "
             "of --lr {:g}), and never decays; give --warmup {} or less to reach it\n",
             t.warmup_steps, t.steps, t.learning_rate * t.steps / t.warmup_steps, 100 * t.steps / t.warmup_steps,
             t.learning_rate, t.steps);
  std::fflush(stderr);
}

void train(TrainOptions& o, std::vector<std::string> command_line, int& exit_code) {
  runtime::RunRequest& request = o.command.request;
  if (request.data_parallel < 1) throw Error(fmt::format("--dp {}: at least one copy", request.data_parallel));
  if (o.command.captured_model.empty() && (!request.export_weights.empty() || !request.export_dir.empty()))
    throw Error("--export-weights and --export-dir are for a captured model: add --model GRAPH.json");
  // A captured model's search writes the plan its export is cut by, so it comes first.
  if (!o.command.captured_model.empty() && o.schedule == "auto") choose_schedule(o, command_line);  // no profile
  if (!o.command.captured_model.empty()) {
    if (const int code = prepare_captured_model(o, !runtime::in_launched_job()); code != 0) {
      exit_code = code;
      return;
    }
    if (!request.training.data.empty() && !std::filesystem::is_regular_file(request.training.data))
      throw Error(fmt::format("--data {}: no such file", request.training.data));
  } else if (!request.training.data.empty()) {
    if (!std::filesystem::is_regular_file(request.training.data))
      throw Error(fmt::format("--data {}: no such file", request.training.data));
    o.command.model.vocab = 256;  // byte-level tokens
  }
  if (request.resume && request.checkpoint_dir.empty()) throw Error("--resume needs --checkpoint DIR");
  trainable_config(o.command.model);           // a bad size is one error here, not one per launched rank
  if (request.json) request.progress = false;  // the report is one JSON document
  if (request.save_every < 0) throw Error(fmt::format("--save-every {}: not negative", request.save_every));
  if (o.schedule == "auto")
    if (const int code = choose_schedule(o, command_line); code != 0) {
      exit_code = code;
      return;
    }
  const int ranks = pipeline_devices(o) * request.data_parallel;
  // Once per job: by the process that trains alone, or by rank 0 (a launcher leaves it to its rank 0).
  const bool in_job = runtime::in_launched_job();
  if (in_job ? runtime::rank_env_from_environment().rank == 0 : ranks == 1)
    warn_if_warmup_outlasts_run(request.training);
  o.command.schedules = {o.schedule};
  if (!is_file(o.schedule) && o.command.schedule.devices == 0 && !defines_parameter(o.command.schedule, "p"))
    o.command.schedule.devices = kDefaultDevices;
  // No job around us: become the launcher of one, with this very command line as every rank's. What
  // can be checked without ranks is checked first, once: a schedule, plan or partition that cannot
  // work is one error here rather than the same error from every rank.
  if (!runtime::in_launched_job() && ranks > 1) {
    TrainingCommand as_rank_zero = o.command;
    runtime::RankEnv env;
    env.world_size = env.local_world_size = ranks;
    prepare_request(as_rank_zero, env);
    // What needs torch to check (a captured model's export, a CUDA device) is checked here, once.
    if (!request.export_dir.empty() || request.device != "cpu")
      if (const int code = check_runtime_request(as_rank_zero.request); code != 0) {
        exit_code = code;
        return;
      }
    LaunchOptions launch_options;
    launch_options.ranks = ranks;
    launch_options.command = command_line;
    std::error_code error;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
    if (!error) launch_options.command[0] = self.string();
    exit_code = launch(launch_options);
    return;
  }
  prepare_request(o.command);
  exit_code = run_runtime(request);
}

}  // namespace

void add_train_command(CLI::App& app, const std::vector<std::string>& command_line, int& exit_code) {
  auto* command = app.add_subcommand(
      "train",
      "Train a GPT-style model with pipeline (and data) parallelism on a text file or synthetic data: "
      "progress per step, then measured against simulated time and memory; checkpoints and resume");
  auto o = std::make_shared<TrainOptions>(defaults());
  command->add_option("--schedule", o->schedule,
                      "Built-in name, file (.fps, .csv, .json), or auto: the fastest schedule `flexpipe search` finds "
                      "with the model's measured operator times (a captured --model's: those its capture measured; "
                      "the partition is written as GRAPH.auto-plan.json) [1f1b]");
  command->add_option("--profile", o->profile,
                      "With --schedule auto: the measured cost graph to use (written by `flexpipe profile`; "
                      "measured and saved here when the file does not exist)");
  auto* auto_margin =
      command
          ->add_option("--auto-margin", o->auto_margin,
                       "With --schedule auto: the search's own program is trained only when it is predicted at least "
                       "this fraction faster than the fastest built-in, which is trained otherwise (a smaller gain is "
                       "within the simulator's error; 0 trains whichever is predicted fastest) [0.05; when the ranks "
                       "outnumber this machine's cores, the fastest built-in]")
          ->check(fraction());
  add_training_options(command, o->command, std::to_string(kDefaultDevices));
  command->add_option("--steps", o->command.request.training.steps, "Training steps [100]")
      ->check(whole_number_at_least(1));
  command->add_option("--data", o->command.request.training.data,
                      "A text file to train on, as byte-level tokens (sets --vocab 256); with a captured --model, a "
                      "torch.save'd dict {\"inputs\": ..., \"targets\": ...} [synthetic]");
  command->add_option("--model", o->command.captured_model,
                      "A captured PyTorch model (flexpipe capture -o GRAPH.json), trained with --plan's cuts (or "
                      "the search's, with --schedule auto) "
                      "instead of the GPT-style model [the GPT-style model of --layers, --hidden, ...]");
  command->add_option("--export-dir", o->command.request.export_dir,
                      "With --model: where its modules for the plan are written (flexpipe export) [GRAPH.export]");
  command
      ->add_option("--export-tolerance", o->export_tolerance,
                   "With --model: the export check's largest accepted difference from the model's outputs, "
                   "relative to the largest output [from the data type and the model's scale, docs/export.md]")
      ->check(non_negative_number());
  command->add_option("--export-weights", o->command.request.export_weights,
                      "With --model: write the trained weights by their state_dict names, for "
                      "model.load_state_dict(torch.load(FILE))");
  command
      ->add_option("--warmup", o->command.request.training.warmup_steps,
                   "Steps of linear learning-rate warm-up; one longer than --steps is warned about [10]")
      ->check(whole_number_at_least(0));
  command
      ->add_option("--decay-steps", o->command.request.training.decay_steps,
                   "Cosine decay length after warm-up; 0: to the last step [0]")
      ->check(whole_number_at_least(0));
  command
      ->add_option("--min-lr-ratio", o->command.request.training.min_lr_ratio,
                   "Cosine decay floor, as a fraction of --lr [0.1]")
      ->check(fraction());
  command
      ->add_option("--clip", o->command.request.training.max_grad_norm,
                   "Clip gradients by their global norm over all stages; 0: never [1.0]")
      ->check(non_negative_number());
  command->add_option("--curve", o->command.request.curve_path, "Write the loss curve as an SVG chart (rank 0)");
  command->add_option("--checkpoint", o->command.request.checkpoint_dir, "Directory for checkpoints [none]");
  command->add_option("--save-every", o->command.request.save_every, "Steps between checkpoints; 0: at the end [0]")
      ->check(whole_number_at_least(0));
  command->add_flag("--resume", o->command.request.resume, "Continue from the latest checkpoint in --checkpoint");
  command->add_flag("--verify", o->command.request.verify,
                    "Also train in one process with autograd and compare (small models only)");
  command->callback([o, auto_margin, &command_line, &exit_code] {
    o->auto_margin_given = auto_margin->count() > 0;
    train(*o, command_line, exit_code);
  });
}

}  // namespace flexpipe::cli
