// Options shared by the subcommands: a schedule, a model and costs; what run and train share (the model,
// the batch, the optimizer, read into the training request); and the subcommands' list.
#pragma once
#include <chrono>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "flexpipe/workflow/cost_inputs.h"
#include "flexpipe/workflow/model_inputs.h"
#include "flexpipe/workflow/partition_forms.h"
#include "flexpipe/workflow/schedule_loading.h"
#include "flexpipe/workflow/training_request.h"

namespace flexpipe::cli {

// Adds SCHEDULE, -p, -m, -v, -D and --lettering to a subcommand. -p, -m and -v set the parameters p, m
// and v of the schedule's program, a built-in's or a file's; -D sets any parameter.
void add_schedule_options(CLI::App* command, ScheduleOptions& options);
// --costs, --uniform-costs, --memory-limit, --model, --partition, the model's shape and the topology.
void add_cost_options(CLI::App* command, CostOptions& options);
// Adds --hardware, --microbatch-size, --seq-len and --flash-attention.
void add_model_shape_options(CLI::App* command, NamedModel& options);
// A progress line on stderr, "[  1.25 s] TEXT" with the seconds since `start`: the form of search's
// and partition's.
void print_progress_line(std::chrono::steady_clock::time_point start, const std::string& text);

// What `flexpipe run` and `flexpipe train` share, and --device's help for them and profile.
inline constexpr const char* kDeviceHelp =
    "Where each rank trains: cpu, cuda (each rank the GPU of its LOCAL_RANK) or cuda:N (every rank GPU N) [cpu]";

// --family and --kv-heads: the model's layout (gpt or llama) and its key/value heads.
void add_model_family_options(CLI::App* command, ModelSize& model);

// -p/-m/-v/-D, the model's size, --family, --kv-heads, --microbatch-size, --partition, --seed, --optimizer, --lr,
// --weight-decay, --dtype, --timeout, --trace, --svg, --json, --hook. Each help text shows the default
// `options` holds when called, so that run and train each describe their own; `devices_default` is -p's.
void add_training_options(CLI::App* command, TrainingCommand& options, const std::string& devices_default);

// The subcommands. Each sets exit_code when it finishes with a finding rather than an error.
void add_schedules_command(CLI::App& app, int& exit_code);
void add_capture_command(CLI::App& app, int& exit_code);
void add_export_command(CLI::App& app, int& exit_code);
void add_show_command(CLI::App& app, int& exit_code);
void add_simulate_command(CLI::App& app, int& exit_code);
void add_check_command(CLI::App& app, int& exit_code);
void add_convert_command(CLI::App& app, int& exit_code);
void add_model_command(CLI::App& app, int& exit_code);
void add_params_command(CLI::App& app, int& exit_code);
void add_launch_command(CLI::App& app, int& exit_code);
void add_run_command(CLI::App& app, int& exit_code);
void add_profile_command(CLI::App& app, int& exit_code);
void add_partition_command(CLI::App& app, int& exit_code);
void add_search_command(CLI::App& app, int& exit_code);
void add_version_command(CLI::App& app, int& exit_code);
// `command_line` is the process's argv: train re-executes it as each rank when it launches its own job.
void add_train_command(CLI::App& app, const std::vector<std::string>& command_line, int& exit_code);

}  // namespace flexpipe::cli
