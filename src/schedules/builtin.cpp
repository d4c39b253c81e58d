// The built-in schedules' catalog: each entry read from its library program, and the parameter
// checks every built-in name goes through.
#include "flexpipe/schedules/builtin.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "flexpipe/lang/parameters.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

std::string normalize(std::string_view name) {
  std::string key;
  for (char c : name)
    if (c != '-' && c != '_' && c != ' ') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}

std::string origin(std::string_view name) { return fmt::format("{}.fps", name); }

// The program's parameters at p, m (unless 0: its default) and v (where it declares one).
std::vector<ProgramParameter> parameters_at(const BuiltinSchedule& builtin, const ScheduleParams& params) {
  std::map<std::string, int64_t> defines = {{"p", params.devices}};
  if (params.microbatches != 0) defines["m"] = params.microbatches;
  if (builtin.chunks_adjustable && params.chunks != 0) defines["v"] = params.chunks;
  return program_parameters(std::string(builtin.program), origin(builtin.name), defines);
}

const ProgramParameter* find_parameter(const std::vector<ProgramParameter>& parameters, std::string_view name) {
  auto it =
      std::find_if(parameters.begin(), parameters.end(), [&](const ProgramParameter& p) { return p.name == name; });
  return it == parameters.end() ? nullptr : &*it;
}

std::string first_failure(const std::vector<ProgramParameter>& parameters) {
  for (const ProgramParameter& p : parameters)
    if (!p.failures.empty()) return p.failures.front();
  return {};
}

}  // namespace

std::string BuiltinSchedule::check(const ScheduleParams& params) const {
  return first_failure(parameters_at(*this, params));
}

BuiltinSchedule read_builtin(std::string_view name, std::string_view text) {
  BuiltinSchedule builtin;
  builtin.name = std::string(name);
  builtin.program = text;
  const std::vector<ProgramParameter> parameters = program_parameters(std::string(text), origin(name));
  for (const char* required : {"p", "m"})
    if (find_parameter(parameters, required) == nullptr)
      throw Error(fmt::format("{}:1:1: error: a built-in's program declares `param {}`, which every built-in takes",
                              origin(name), required));
  // Compiled at its defaults for what it states beyond its parameters: its description and stages.
  CompileOptions options;
  options.max_steps = kLibraryStepLimit;
  const CompiledProgram compiled = compile_program(std::string(text), origin(name), {}, options);
  if (compiled.description.empty())
    throw Error(
        fmt::format("{}:1:1: error: a built-in's program states its description, the line `flexpipe "
                    "schedules` shows\n  hint: write description \"...\" at the top",
                    origin(name)));
  builtin.description = compiled.description;
  const ProgramParameter* chunks = find_parameter(parameters, "v");
  builtin.chunks_adjustable = chunks != nullptr;
  const Schedule& schedule = compiled.schedule;
  builtin.default_chunks =
      chunks != nullptr ? static_cast<int>(chunks->value) : schedule.stages_per_pipeline / schedule.num_devices;
  return builtin;
}

const std::vector<BuiltinSchedule>& builtin_schedules() {
  static const std::vector<BuiltinSchedule> catalog = [] {
    std::vector<BuiltinSchedule> entries;
    for (const LibraryProgram& program : library_programs())
      entries.push_back(read_builtin(program.name, program.text));
    return entries;
  }();
  return catalog;
}

const BuiltinSchedule* find_builtin(std::string_view name) {
  const std::string key = normalize(name);
  for (const auto& s : builtin_schedules())
    if (normalize(s.name) == key) return &s;
  return nullptr;
}

const BuiltinSchedule& resolve_builtin(std::string_view name, ScheduleParams& params) {
  const BuiltinSchedule* builtin = find_builtin(name);
  if (builtin == nullptr) {
    std::string known;
    for (const auto& s : builtin_schedules()) known += (known.empty() ? "" : ", ") + s.name;
    throw Error(fmt::format("unknown schedule '{}' (built-in schedules: {})", printable(name), known));
  }
  if (params.devices <= 0)
    throw Error(fmt::format("{}: needs at least 1 device (got p={})", builtin->name, params.devices));
  if (params.chunks == 0) params.chunks = builtin->default_chunks;
  if (!builtin->chunks_adjustable && params.chunks != builtin->default_chunks)
    throw Error(fmt::format("{}: has exactly {} chunk{} per device (got v={})", builtin->name, builtin->default_chunks,
                            builtin->default_chunks == 1 ? "" : "s", params.chunks));
  if (params.chunks <= 0) throw Error(fmt::format("{}: needs v >= 1 (got v={})", builtin->name, params.chunks));
  const std::vector<ProgramParameter> parameters = parameters_at(*builtin, params);
  if (params.microbatches == 0) params.microbatches = static_cast<int>(find_parameter(parameters, "m")->value);
  if (params.microbatches < 0)
    throw Error(fmt::format("{}: needs m >= 1 (got m={})", builtin->name, params.microbatches));
  if (std::string why = first_failure(parameters); !why.empty())
    throw Error(fmt::format("{} with p={}, m={}, v={}: {}", builtin->name, params.devices, params.microbatches,
                            params.chunks, why));
  return *builtin;
}

}  // namespace flexpipe
