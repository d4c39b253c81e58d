// Loading a schedule a command names: a built-in's program or a program file compiled with the
// command's parameters, or a schedule file read as it stands; then checked by the validator.
#include "flexpipe/workflow/schedule_loading.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/lang/parameters.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe {

const std::map<std::string, CsvLettering>& csv_letterings() {
  static const std::map<std::string, CsvLettering> letterings = {{"detect", CsvLettering::Detect},
                                                                 {"current", CsvLettering::Current},
                                                                 {"legacy", CsvLettering::Legacy}};
  return letterings;
}

bool defines_parameter(const ScheduleOptions& options, const std::string& name) {
  return parse_defines(options.defines).contains(name);
}

bool devices_from_command(const ScheduleOptions& options) {
  return !is_schedule_file(schedule_source(options.spec)) && !defines_parameter(options, "p");
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
  const ScheduleSource source = schedule_source(options.spec);
  if (is_schedule_file(source) && source != ScheduleSource::Program) {
    if (options.devices != 0 || options.microbatches != 0 || options.chunks != 0 || !options.defines.empty())
      throw Error(fmt::format("{}: -p, -m, -v and -D set a program's parameters; a schedule file fixes them itself",
                              options.spec));
    ScheduleParams params;
    CsvReadOptions csv;
    csv.lettering = csv_letterings().at(options.lettering);
    return {load_schedule(options.spec, params, csv), std::nullopt};
  }
  std::map<std::string, int64_t> defines = program_defines(options);
  if (source == ScheduleSource::Program) {
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

}  // namespace flexpipe
