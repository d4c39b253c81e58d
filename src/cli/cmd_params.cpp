// flexpipe params: a program's parameters, their values and the ranges their checks allow — what a
// sweep (or the automated scheduler) may vary.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/lang/parameters.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct ParamsOptions {
  ScheduleOptions schedule;
  bool json = false;
};

std::string bound(const std::optional<int64_t>& value) { return value ? std::to_string(*value) : "-"; }

void run(const ParamsOptions& o) {
  const std::string& spec = o.schedule.spec;
  const std::map<std::string, int64_t> defines = parse_defines(o.schedule.defines);
  std::vector<ProgramParameter> parameters;
  if (schedule_source(spec) == ScheduleSource::Program) {
    parameters = program_parameters(read_text_file(spec), spec, defines);
  } else if (const LibraryProgram* builtin = find_library_program(spec)) {
    parameters = program_parameters(std::string(builtin->text), fmt::format("{}.fps", builtin->name), defines);
  } else {
    throw Error(fmt::format("{}: params needs a program: a built-in schedule's name or a file (.fps)", spec));
  }
  if (o.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const ProgramParameter& p : parameters) {
      nlohmann::json entry = {{"name", p.name},
                              {"value", p.value},
                              {"conditions", p.conditions},
                              {"satisfied", p.satisfied},
                              {"line", p.location.line}};
      entry["min"] = p.min ? nlohmann::json(*p.min) : nlohmann::json(nullptr);
      entry["max"] = p.max ? nlohmann::json(*p.max) : nlohmann::json(nullptr);
      list.push_back(entry);
    }
    fmt::print("{}\n", list.dump(2));
    return;
  }
  fmt::print("{:<12} {:>8} {:>8} {:>8}  {}\n", "parameter", "value", "min", "max", "checks");
  for (const ProgramParameter& p : parameters) {
    std::string checks;
    for (const std::string& c : p.conditions) checks += (checks.empty() ? "" : "; ") + c;
    fmt::print("{:<12} {:>8} {:>8} {:>8}  {}{}\n", p.name, p.value, bound(p.min), bound(p.max), checks,
               p.satisfied ? "" : "  (fails)");
  }
}
}  // namespace

void add_params_command(CLI::App& app, int&) {
  auto* command = app.add_subcommand(
      "params", "List a program's parameters, values and allowed ranges: a .fps file's or a built-in schedule's");
  auto o = std::make_shared<ParamsOptions>();
  command->add_option("program", o->schedule.spec, "Schedule program (.fps) or built-in schedule name")->required();
  command->add_option("-D,--define", o->schedule.defines, "Set a parameter: -D name=value (repeatable)");
  command->add_flag("--json", o->json, "Print the parameters as JSON");
  command->callback([o] { run(*o); });
}

}  // namespace flexpipe::cli
