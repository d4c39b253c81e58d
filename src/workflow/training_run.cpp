// flexpipe train's run: checks, the automatic choice, the captured model's export, then train or launch.
#include "flexpipe/workflow/training_run.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <initializer_list>

#include <fmt/format.h>

#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/launch/launcher.h"
#include "flexpipe/launch/python_package.h"
#include "flexpipe/launch/runtime_loader.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/train/rank_env.h"
#include "flexpipe/workflow/auto_schedule.h"
#include "flexpipe/workflow/captured_plan.h"
#include "flexpipe/workflow/export_stamp.h"
#include "flexpipe/workflow/pretrained_folder.h"

namespace flexpipe {

namespace {

// Whether `arg` gives the option `flag` a value: "--schedule", "--schedule=X", or "-p4" for a short flag.
// Returns how many arguments it spans (0: not this option).
int option_span(const std::string& arg, const std::string& flag) {
  if (arg == flag) return 2;  // and its value
  if (arg.starts_with(flag + "=")) return 1;
  if (flag.size() == 2 && arg.size() > 2 && arg.starts_with(flag) && std::isdigit(static_cast<unsigned char>(arg[2])))
    return 1;
  return 0;
}

// train --model GRAPH.json: the captured model's graph, its plan (made here when not given), and its export
// for the plan, made here (once, before any rank starts) unless this process is a rank of a job, which
// finds it made.
// Returns 0, or the failed export's exit code.
int prepare_captured_model(TrainRequest& o, bool launcher) {
  runtime::RunRequest& request = o.command.request;
  const std::string& model = o.command.captured_model;
  request.captured_graph = load_cost_graph(model);
  if (!request.captured_graph.capture)
    throw Error(
        fmt::format("--model {}: not a captured model (no capture record): write one with `flexpipe "
                    "capture FILE.py:FACTORY --input SHAPE -o {}`",
                    model, model));
  if (o.command.plan.empty()) partition_captured_model(o);  // as `flexpipe partition` would by default
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

// The checks made before anything is measured or exported; a text file's bytes set the vocabulary.
void check_request(TrainRequest& o) {
  const runtime::RunRequest& request = o.command.request;
  if (request.data_parallel < 1) throw Error(fmt::format("--dp {}: at least one copy", request.data_parallel));
  if (o.command.captured_model.empty() && (!request.export_weights.empty() || !request.export_dir.empty()))
    throw Error("--export-weights and --export-dir are for a captured model: add --model GRAPH.json");
  resolve_pretrained_folder(o);
}

void check_data(TrainRequest& o) {
  const std::string& data = o.command.request.training.data;
  if (data.empty()) return;
  // Checked here, without torch, so that the runtime's reader never meets a FIFO or a device.
  if (const std::string why = why_not_a_regular_file(data); !why.empty())
    throw Error(fmt::format("--data {}: {}", data, why));
  if (o.command.captured_model.empty()) o.command.model.vocab = 256;  // byte-level tokens
}

// No job around us: become the launcher of one, every rank running this command line with the request's
// resolved choice. What can be checked without ranks is checked first, once: a schedule, plan or
// partition that cannot work is one error here rather than the same error from every rank.
int launch_ranks(TrainRequest& o, int ranks, const std::vector<std::string>& command_line) {
  const runtime::RunRequest& request = o.command.request;
  TrainingCommand as_rank_zero = o.command;
  runtime::RankEnv env;
  env.world_size = env.local_world_size = ranks;
  prepare_request(as_rank_zero, env);
  // What needs torch to check (a captured model's export, a CUDA device) is checked here, once.
  if (!request.export_dir.empty() || request.device != "cpu")
    if (const int code = check_runtime_request(as_rank_zero.request); code != 0) return code;
  LaunchOptions launch_options;
  launch_options.ranks = ranks;
  launch_options.command = rank_command_line(command_line, o.auto_choice);
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) launch_options.command[0] = self.string();
  return launch(launch_options);
}

}  // namespace

std::vector<std::string> rank_command_line(const std::vector<std::string>& command_line,
                                           const std::optional<AutoChoice>& choice) {
  if (!choice) return command_line;
  std::vector<std::string> replaced = {"--schedule"};
  if (choice->searched_program)
    replaced.insert(replaced.end(), {"-p", "--devices", "-m", "--microbatches", "-v", "--chunks"});
  std::vector<std::string> out;
  for (size_t i = 0; i < command_line.size();) {
    int span = 0;
    for (const std::string& flag : replaced)
      if (span == 0) span = option_span(command_line[i], flag);
    if (span == 0) out.push_back(command_line[i]);
    i += std::max(span, 1);
  }
  out.insert(out.end(), {"--schedule", choice->schedule});
  if (!choice->partition.empty()) out.insert(out.end(), {"--partition", choice->partition});
  if (!choice->plan.empty()) out.insert(out.end(), {"--plan", choice->plan});
  return out;
}

int train(TrainRequest& o, const std::vector<std::string>& command_line) {
  runtime::RunRequest& request = o.command.request;
  check_request(o);
  const bool in_job = runtime::in_launched_job();
  if (!o.command.captured_model.empty()) {
    // A captured model's search writes the plan its export is cut by, so it comes first (and profiles nothing).
    if (o.schedule == "auto") resolve_auto_schedule(o);
    if (const int code = prepare_captured_model(o, !in_job); code != 0) return code;
  }
  check_data(o);
  if (request.resume && request.checkpoint_dir.empty()) throw Error("--resume needs --checkpoint DIR");
  trainable_config(o.command.model);           // a bad size is one error here, not one per launched rank
  if (request.json) request.progress = false;  // the report is one JSON document
  if (request.save_every < 0) throw Error(fmt::format("--save-every {}: not negative", request.save_every));
  if (o.schedule == "auto")
    if (const int code = resolve_auto_schedule(o); code != 0) return code;
  const int ranks = pipeline_devices(o) * request.data_parallel;
  // Once per job: by the process that trains alone, or by rank 0 (a launcher leaves it to its rank 0).
  if (in_job ? runtime::rank_env_from_environment().rank == 0 : ranks == 1)
    warn_if_warmup_outlasts_run(request.training);
  o.command.schedules = {o.schedule};
  ScheduleOptions schedule = o.command.schedule;
  schedule.spec = o.schedule;
  if (o.command.schedule.devices == 0 && devices_from_command(schedule))
    o.command.schedule.devices = kDefaultTrainDevices;
  if (!in_job && ranks > 1) return write_pretrained_folder(o, launch_ranks(o, ranks, command_line));
  prepare_request(o.command);
  const int code = run_runtime(request);
  return in_job ? code : write_pretrained_folder(o, code);
}

}  // namespace flexpipe
