#pragma once
// Options shared by the subcommands that take a schedule and costs.
#include <string>

#include <CLI/CLI.hpp>

#include "flexpipe/core/costs.h"
#include "flexpipe/core/schedule.h"

namespace flexpipe::cli {

struct ScheduleOptions {
  std::string spec;  // built-in name or file
  int devices = 0;   // 0: not given
  int microbatches = 0;
  int chunks = 0;
  std::string lettering = "detect";
};

// Adds SCHEDULE, -p, -m, -v and --lettering to a subcommand.
void add_schedule_options(CLI::App* command, ScheduleOptions& options);
// Loads the schedule and checks it; throws Error (unknown name, bad file, invalid schedule).
Schedule load_checked_schedule(const ScheduleOptions& options);

struct CostOptions {
  std::string costs_file;
  std::string uniform = "1,1,1,0";
  double memory_limit = 0;  // 0: from the cost table
};

void add_cost_options(CLI::App* command, CostOptions& options);
CostTable load_costs(const CostOptions& options, const Schedule& schedule);

// The subcommands. Each sets exit_code when it finishes with a finding rather than an error.
void add_schedules_command(CLI::App& app, int& exit_code);
void add_show_command(CLI::App& app, int& exit_code);
void add_simulate_command(CLI::App& app, int& exit_code);
void add_check_command(CLI::App& app, int& exit_code);
void add_convert_command(CLI::App& app, int& exit_code);

}  // namespace flexpipe::cli
