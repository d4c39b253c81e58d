#pragma once
// Options shared by the subcommands that take a schedule and costs.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/cost_table.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/partition/plan.h"
#include "flexpipe/support/quantity.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe::cli {

struct ScheduleOptions {
  std::string spec;  // built-in name or file
  int devices = 0;   // 0: not given
  int microbatches = 0;
  int chunks = 0;
  std::string lettering = "detect";
  std::vector<std::string> defines;  // -D name=value: any parameter of a program, built-in or file
};

// Adds SCHEDULE, -p, -m, -v, -D and --lettering to a subcommand. -p, -m and -v set the parameters p, m
// and v of the schedule's program, a built-in's or a file's; -D sets any parameter.
void add_schedule_options(CLI::App* command, ScheduleOptions& options);
// "-D name=value" strings as a program's defines; throws Error naming a malformed one.
std::map<std::string, int64_t> parse_defines(const std::vector<std::string>& defines);
// A schedule program file (.fps); built-in names are programs too, compiled into the binary.
bool is_program(const std::string& spec);
// Whether -D sets `name`: then a command's own default for -p (run: the job's ranks) does not apply.
bool defines_parameter(const ScheduleOptions& options, const std::string& name);

// A schedule and, when it came from a program, the program's source map.
struct LoadedSchedule {
  Schedule schedule;
  std::optional<CompiledProgram> program;
};
// Loads without validating; throws Error (unknown name, bad file, program errors).
LoadedSchedule load_schedule_spec(const ScheduleOptions& options, const CompileOptions& compile = {});
// The validator's findings as lines; for a program, each points at the line that emitted the action.
std::vector<std::string> describe(const LoadedSchedule& loaded, const std::vector<Diagnostic>& diagnostics);
// Throws Error "SPEC: invalid schedule (N errors)" with the findings, one per line, when validation finds any.
void require_valid(const LoadedSchedule& loaded, const std::string& spec);
// Loads the schedule and checks it; throws Error (unknown name, bad file, invalid schedule).
Schedule load_checked_schedule(const ScheduleOptions& options);

// A model graph named on the command line (zoo name or cost-graph file) and how to time it.
struct ModelOptions {
  std::string model;  // empty: no model
  std::string hardware = "H100-80GB";
  double microbatch_size = 1;
  double seq_len = 0;  // 0: the model's own
  bool flash_attention = false;
};

struct CostOptions {
  std::string costs_file;
  std::string uniform = "1,1,1,0";
  Quantity memory_limit;        // 0: from the cost table; a bare number is in the table's memory unit
  ModelOptions model;           // --model: the table comes from aggregating the model's cost graph
  std::string partition;        // Megatron layout, layers:N,N,... or ops:N,N,...; empty: even
  int devices_per_node = 0;     // 0: the table's own topology
  std::string inter_node_link;  // "LATENCY[,BANDWIDTH]" in the table's units; with devices_per_node
};

void add_cost_options(CLI::App* command, CostOptions& options);
// Adds --hardware, --microbatch-size, --seq-len and --flash-attention (cmd_model.cpp).
void add_model_shape_options(CLI::App* command, ModelOptions& options);
// A zoo model built on the profile, or a cost-graph file (.json) (cmd_model.cpp). `progress`, when
// set, hears a line before and after reading a file: a large graph takes seconds.
CostGraph load_model_graph(const ModelOptions& options, const std::function<void(const std::string&)>& progress = {});
// A progress line on stderr, "[  1.25 s] TEXT" with the seconds since `start`: the form of search's
// and partition's (options.cpp).
void print_progress_line(std::chrono::steady_clock::time_point start, const std::string& text);
// A rate per second in the graph's time unit (zoo models and measured graphs use milliseconds);
// throws Error for a unit it cannot convert (cmd_model.cpp).
double per_time_unit(const CostGraph& graph, double per_second);
// The stage cost table of the model under a partition for `stages` stages (cmd_model.cpp).
CostTable model_cost_table(const ModelOptions& options, const std::string& partition, int stages);
CostTable load_costs(const CostOptions& options, const Schedule& schedule);
// --devices-per-node and --inter-node-link, when given, replace the table's topology.
void apply_topology(const CostOptions& options, CostTable& costs);
// A --partition spec (Megatron layout, layers:N,..., ops:N,...; empty: even by layers) for `stages`
// chunks of `graph`; throws Error when it makes another number of chunks (cmd_model.cpp).
Partition parse_partition(const CostGraph& graph, const std::string& spec, int stages);

// A partition plan file applied to `schedule`: its model's graph rebuilt at the plan's shape, the
// schedule with the plan's R / OFFLOAD / RELOAD, the cost table with its decisions; the memory limit is
// the plan's unless `memory_limit` > 0 (cmd_partition.cpp).
AppliedPlan apply_plan_file(const std::string& path, const Schedule& schedule, double memory_limit);

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
