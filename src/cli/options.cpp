#include "options.h"

#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"
#include "number_checks.h"

namespace flexpipe::cli {

namespace {

// The --lettering names; the one table both the option's check and load_schedule_spec read.
const std::map<std::string, CsvLettering>& csv_letterings() {
  static const std::map<std::string, CsvLettering> letterings = {{"detect", CsvLettering::Detect},
                                                                 {"current", CsvLettering::Current},
                                                                 {"legacy", CsvLettering::Legacy}};
  return letterings;
}

}  // namespace

void add_file_options(CLI::App* command, ScheduleOptions& options) {
  command
      ->add_option("schedule", options.spec,
                   "Built-in schedule name (see `flexpipe schedules`) or a file (.fps program, .csv, .json)")
      ->required();
  command->add_option("-D,--define", options.defines, "Set a program parameter: -D name=value (repeatable)");
  command
      ->add_option("--lettering", options.lettering, "PyTorch CSV lettering: detect, current (I, B) or legacy (B, BW)")
      ->check(CLI::IsMember(csv_letterings()));
}

void add_schedule_options(CLI::App* command, ScheduleOptions& options) {
  add_file_options(command, options);
  command->add_option("-p,--devices", options.devices, "Devices (pipeline ranks) of a built-in schedule [4]")
      ->check(whole_number_at_least(1));
  command->add_option("-m,--microbatches", options.microbatches, "Micro-batches of a built-in schedule [2p]")
      ->check(whole_number_at_least(1));
  command->add_option("-v,--chunks", options.chunks, "Stages per device of a built-in schedule [its default]")
      ->check(whole_number_at_least(1));
}

bool is_program(const std::string& spec) { return spec.size() > 4 && spec.ends_with(".fps"); }

std::map<std::string, int64_t> parse_defines(const std::vector<std::string>& defines) {
  std::map<std::string, int64_t> values;
  for (const std::string& define : defines) {
    const size_t eq = define.find('=');
    const std::string name = define.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : define.substr(eq + 1);
    size_t used = 0;
    int64_t number = 0;
    try {
      number = std::stoll(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (name.empty() || value.empty() || used != value.size())
      throw Error(fmt::format("-D {}: expected name=integer", define));
    values[name] = number;
  }
  return values;
}

LoadedSchedule load_schedule_spec(const ScheduleOptions& options, const CompileOptions& compile) {
  const bool is_file = looks_like_file(options.spec);
  if (is_file && (options.devices != 0 || options.microbatches != 0 || options.chunks != 0))
    throw Error(fmt::format("{}: -p, -m and -v apply to built-in schedules only; a file fixes them itself{}",
                            options.spec, is_program(options.spec) ? " (set a program's parameters with -D)" : ""));
  if (!options.defines.empty() && !is_program(options.spec))
    throw Error(fmt::format("{}: -D sets parameters of .fps programs only", options.spec));
  if (is_program(options.spec)) {
    CompiledProgram program = load_program(options.spec, parse_defines(options.defines), compile);
    Schedule schedule = program.schedule;
    return {std::move(schedule), std::move(program)};
  }
  // The options' checks refuse these already; this names the value for callers that fill them in code.
  for (const auto& [flag, value] :
       {std::pair{"-p", options.devices}, std::pair{"-m", options.microbatches}, std::pair{"-v", options.chunks}})
    if (value < 0) throw Error(fmt::format("{} must be a whole number of at least 1, got {}", flag, value));
  ScheduleParams params;
  params.devices = options.devices == 0 ? 4 : options.devices;
  params.microbatches = options.microbatches;
  params.chunks = options.chunks;
  if (!is_file) {
    // Built-in names come from the embedded library programs, so they explain like any program.
    CompiledProgram program = compile_builtin(options.spec, params);
    Schedule schedule = program.schedule;
    return {std::move(schedule), std::move(program)};
  }
  CsvReadOptions csv;
  csv.lettering = csv_letterings().at(options.lettering);
  return {load_schedule(options.spec, params, csv), std::nullopt};
}

std::vector<std::string> describe(const LoadedSchedule& loaded, const std::vector<Diagnostic>& diagnostics) {
  if (loaded.program) return locate_diagnostics(*loaded.program, diagnostics);
  std::vector<std::string> lines;
  for (const Diagnostic& d : diagnostics) lines.push_back(d.to_string());
  return lines;
}

void require_valid(const LoadedSchedule& loaded, const std::string& spec) {
  const std::vector<Diagnostic> diagnostics = validate(loaded.schedule);
  if (diagnostics.empty()) return;
  std::string text =
      fmt::format("{}: invalid schedule ({} error{})", spec, diagnostics.size(), diagnostics.size() == 1 ? "" : "s");
  const std::vector<std::string> lines = describe(loaded, diagnostics);
  for (size_t i = 0; i < lines.size() && i < kMaxPrintedErrors; ++i) text += "\n  " + lines[i];
  if (lines.size() > kMaxPrintedErrors) text += "\n  " + more_errors(lines.size() - kMaxPrintedErrors);
  throw Error(text);
}

Schedule load_checked_schedule(const ScheduleOptions& options) {
  LoadedSchedule loaded = load_schedule_spec(options);
  require_valid(loaded, options.spec);
  return std::move(loaded.schedule);
}

void add_cost_options(CLI::App* command, CostOptions& options) {
  auto* file = command->add_option("--costs", options.costs_file, "Stage cost table (JSON, docs/cost-table.md)");
  command
      ->add_option("--uniform-costs", options.uniform,
                   "F,I,W[,COMM]: every stage takes F, I, W (B = I + W); 1 memory unit per micro-batch in flight")
      ->excludes(file);
  command->add_option("--memory-limit", options.memory_limit, "Memory capacity of every device (overrides the table)")
      ->check(positive_number());
  auto* model =
      command->add_option("--model", options.model.model,
                          "Aggregate the stage costs from a model: zoo name (flexpipe model list) or cost-graph file");
  model->excludes(file);
  command
      ->add_option("--partition", options.partition,
                   "With --model: Megatron layout (\"Et*3|(tt|)*29,m|L\"), layers:N,N,... or ops:N,N,... [even]")
      ->needs(model);
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

namespace {

// "LATENCY[,BANDWIDTH]", both non-negative numbers, the bandwidth positive.
Link parse_inter_node_link(const std::string& text) {
  const auto fail = [&] {
    return Error(fmt::format(
        "--inter-node-link '{}': expected LATENCY[,BANDWIDTH], a latency of at least 0 and a positive bandwidth",
        text));
  };
  Link link;
  const size_t comma = text.find(',');
  try {
    size_t used = 0;
    const std::string latency = text.substr(0, comma);
    link.latency = std::stod(latency, &used);
    if (used != latency.size()) throw fail();
    if (comma != std::string::npos) {
      const std::string bandwidth = text.substr(comma + 1);
      link.bandwidth = std::stod(bandwidth, &used);
      if (used != bandwidth.size()) throw fail();
    }
  } catch (const std::invalid_argument&) {
    throw fail();
  } catch (const std::out_of_range&) {
    throw fail();
  }
  if (!(link.latency >= 0) || !(link.bandwidth > 0) || std::isinf(link.latency)) throw fail();
  return link;
}

}  // namespace

void apply_topology(const CostOptions& options, CostTable& costs) {
  if (options.devices_per_node <= 0) return;
  costs.devices_per_node = options.devices_per_node;
  costs.inter_node_link = options.inter_node_link.empty() ? Link{} : parse_inter_node_link(options.inter_node_link);
}

CostTable load_costs(const CostOptions& options, const Schedule& schedule) {
  CostTable costs;
  std::string origin = "--uniform-costs";
  if (!options.costs_file.empty()) {
    costs = load_cost_table(options.costs_file, schedule.stages_per_pipeline);
    origin = options.costs_file;
  } else if (!options.model.model.empty()) {
    costs = model_cost_table(options.model, options.partition, schedule.stages_per_pipeline);
    origin = options.model.model;
  } else {
    costs = parse_uniform_costs(options.uniform, schedule.stages_per_pipeline);
  }
  if (options.memory_limit > 0) costs.memory_capacity = {options.memory_limit};
  apply_topology(options, costs);
  check_cost_table(costs, schedule.stages_per_pipeline, schedule.num_devices, origin);
  return costs;
}

void print_progress_line(std::chrono::steady_clock::time_point start, const std::string& text) {
  fmt::print(stderr, "[{:6.2f} s] {}\n",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), text);
}

}  // namespace flexpipe::cli
