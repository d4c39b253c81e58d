#include "options.h"

#include <fmt/format.h>

#include "flexpipe/core/error.h"
#include "flexpipe/core/schedule_io.h"
#include "flexpipe/core/validator.h"

namespace flexpipe::cli {

void add_schedule_options(CLI::App* command, ScheduleOptions& options) {
  command->add_option("schedule", options.spec, "Built-in schedule name (see `flexpipe schedules`) or a file (.csv, .json)")
      ->required();
  command->add_option("-p,--devices", options.devices, "Devices (pipeline ranks) of a built-in schedule [4]");
  command->add_option("-m,--microbatches", options.microbatches, "Micro-batches of a built-in schedule [2p]");
  command->add_option("-v,--chunks", options.chunks, "Stages per device of a built-in schedule [its default]");
  command->add_option("--lettering", options.lettering, "PyTorch CSV lettering: detect, current (I, B) or legacy (B, BW)")
      ->check(CLI::IsMember({"detect", "current", "legacy"}));
}

Schedule load_checked_schedule(const ScheduleOptions& options) {
  const bool is_file = looks_like_file(options.spec);
  if (is_file && (options.devices != 0 || options.microbatches != 0 || options.chunks != 0))
    throw Error(fmt::format("{}: -p, -m and -v apply to built-in schedules only; a file fixes them itself", options.spec));
  ScheduleParams params;
  params.devices = options.devices == 0 ? 4 : options.devices;
  params.microbatches = options.microbatches;
  params.chunks = options.chunks;
  if (options.devices < 0 || options.microbatches < 0 || options.chunks < 0)
    throw Error(fmt::format("-p, -m and -v must be positive (got p={}, m={}, v={})", options.devices,
                            options.microbatches, options.chunks));
  CsvReadOptions csv;
  csv.lettering = options.lettering == "legacy"    ? CsvLettering::Legacy
                  : options.lettering == "current" ? CsvLettering::Current
                                                   : CsvLettering::Detect;
  Schedule schedule = load_schedule(options.spec, params, csv);
  const std::vector<Diagnostic> diagnostics = validate(schedule);
  if (!diagnostics.empty()) {
    std::string text = fmt::format("{}: invalid schedule ({} error{})", options.spec, diagnostics.size(),
                                   diagnostics.size() == 1 ? "" : "s");
    for (const Diagnostic& d : diagnostics) text += "\n  " + d.to_string();
    throw Error(text);
  }
  return schedule;
}

void add_cost_options(CLI::App* command, CostOptions& options) {
  auto* file = command->add_option("--costs", options.costs_file, "Stage cost table (JSON, docs/cost-table.md)");
  command->add_option("--uniform-costs", options.uniform,
                      "F,I,W[,COMM]: every stage takes F, I, W (B = I + W); 1 memory unit per micro-batch in flight")
      ->excludes(file);
  command->add_option("--memory-limit", options.memory_limit, "Memory capacity of every device (overrides the table)")
      ->check(CLI::PositiveNumber);
  auto* model = command->add_option("--model", options.model.model,
                                    "Aggregate the stage costs from a model: zoo name (flexpipe model list) or cost-graph file");
  model->excludes(file);
  command->add_option("--partition", options.partition,
                      "With --model: Megatron layout (\"Et*3|(tt|)*29,m|L\"), layers:N,N,... or ops:N,N,... [even]")
      ->needs(model);
  add_model_shape_options(command, options.model);
}

CostTable load_costs(const CostOptions& options, const Schedule& schedule) {
  CostTable costs;
  std::string origin = "--uniform-costs";
  if (!options.costs_file.empty()) {
    costs = load_cost_table(options.costs_file);
    origin = options.costs_file;
  } else if (!options.model.model.empty()) {
    costs = model_cost_table(options.model, options.partition, schedule.stages_per_pipeline);
    origin = options.model.model;
  } else {
    costs = parse_uniform_costs(options.uniform, schedule.stages_per_pipeline);
  }
  if (options.memory_limit > 0) costs.memory_capacity = {options.memory_limit};
  check_cost_table(costs, schedule.stages_per_pipeline, schedule.num_devices, origin);
  return costs;
}

}  // namespace flexpipe::cli
