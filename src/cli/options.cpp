#include "options.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/lang/parameters.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
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

bool is_program(const std::string& spec) { return spec.size() > 4 && spec.ends_with(".fps"); }

bool defines_parameter(const ScheduleOptions& options, const std::string& name) {
  return parse_defines(options.defines).contains(name);
}

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

namespace {

// -p, -m and -v name the parameters p, m and v of every program, built-in or file; -D sets any
// parameter, those three included. Setting one both ways is refused rather than one silently winning.
std::map<std::string, int64_t> program_defines(const ScheduleOptions& options) {
  std::map<std::string, int64_t> defines = parse_defines(options.defines);
  for (const auto& [flag, name, value] :
       {std::tuple{"-p", "p", options.devices}, std::tuple{"-m", "m", options.microbatches},
        std::tuple{"-v", "v", options.chunks}}) {
    // The options' checks refuse these already; this names the value for callers that fill them in code.
    if (value < 0) throw Error(fmt::format("{} must be a whole number of at least 1, got {}", flag, value));
    if (value == 0) continue;
    if (defines.contains(name))
      throw Error(fmt::format("{} {} and -D {}={} both set the parameter {}: give one", flag, value, name,
                              defines.at(name), name));
    defines[name] = value;
  }
  return defines;
}

// A program file must declare what -p, -m and -v set: its p might not be a device count at all.
void require_declared(const std::string& path, const ScheduleOptions& options) {
  if (options.devices == 0 && options.microbatches == 0 && options.chunks == 0) return;
  std::vector<std::string> names;
  for (const ProgramParameter& p : program_parameters(read_text_file(path), path)) names.push_back(p.name);
  for (const auto& [flag, name, value] :
       {std::tuple{"-p", "p", options.devices}, std::tuple{"-m", "m", options.microbatches},
        std::tuple{"-v", "v", options.chunks}})
    if (value != 0 && std::find(names.begin(), names.end(), name) == names.end())
      throw Error(fmt::format("{}: {} sets the program's parameter {}, which it does not declare ({})", path, flag,
                              name,
                              names.empty() ? "it has no parameters"
                                            : fmt::format("its parameters: {}", fmt::join(names, ", "))));
}

// The value a built-in's parameter takes from the defines, which then no longer hold it.
int take_define(std::map<std::string, int64_t>& defines, const std::string& name) {
  const auto found = defines.find(name);
  if (found == defines.end()) return 0;
  const int64_t value = found->second;
  defines.erase(found);
  if (value < 1 || value > std::numeric_limits<int>::max())
    throw Error(fmt::format("-D {}={}: must be a whole number of at least 1", name, value));
  return static_cast<int>(value);
}

}  // namespace

LoadedSchedule load_schedule_spec(const ScheduleOptions& options, const CompileOptions& compile) {
  const bool is_file = looks_like_file(options.spec);
  if (is_file && !is_program(options.spec)) {
    if (options.devices != 0 || options.microbatches != 0 || options.chunks != 0 || !options.defines.empty())
      throw Error(fmt::format("{}: -p, -m, -v and -D set a program's parameters; a schedule file fixes them itself",
                              options.spec));
    ScheduleParams params;
    CsvReadOptions csv;
    csv.lettering = csv_letterings().at(options.lettering);
    return {load_schedule(options.spec, params, csv), std::nullopt};
  }
  std::map<std::string, int64_t> defines = program_defines(options);
  if (is_program(options.spec)) {
    require_declared(options.spec, options);
    CompiledProgram program = load_program(options.spec, defines, compile);
    Schedule schedule = program.schedule;
    return {std::move(schedule), std::move(program)};
  }
  // Built-in names come from the embedded library programs, so they explain like any program.
  ScheduleParams params;
  params.devices = take_define(defines, "p");
  if (params.devices == 0) params.devices = 4;
  params.microbatches = take_define(defines, "m");
  params.chunks = take_define(defines, "v");
  CompiledProgram program = compile_builtin(options.spec, params, defines);
  Schedule schedule = program.schedule;
  return {std::move(schedule), std::move(program)};
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
  if (options.memory_limit.value > 0)
    costs.memory_capacity = {in_memory_unit(options.memory_limit, costs.memory_unit, "--memory-limit")};
  apply_topology(options, costs);
  check_cost_table(costs, schedule.stages_per_pipeline, schedule.num_devices, origin);
  return costs;
}

void print_progress_line(std::chrono::steady_clock::time_point start, const std::string& text) {
  fmt::print(stderr, "[{:6.2f} s] {}\n",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), text);
}

}  // namespace flexpipe::cli
