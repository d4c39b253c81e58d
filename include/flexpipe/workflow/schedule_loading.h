// A schedule as a command names it: the argument (resolved by schedule_source, the one rule), the -p /
// -m / -v / -D parameters it is compiled with, loaded and checked. Every command that takes a schedule
// loads it here.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flexpipe/interop/pytorch_csv.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe {

struct ScheduleOptions {
  std::string spec;  // built-in name or file
  int devices = 0;   // 0: not given
  int microbatches = 0;
  int chunks = 0;
  std::string lettering = "detect";
  std::vector<std::string> defines;  // -D name=value: any parameter of a program, built-in or file
};

// The --lettering names: the one table both the option's check and load_schedule_spec read.
const std::map<std::string, CsvLettering>& csv_letterings();
// "-D name=value" strings as a program's defines; throws Error naming a malformed one.
std::map<std::string, int64_t> parse_defines(const std::vector<std::string>& defines);
// Whether -D sets `name`: then a command's own default for -p (run: the job's ranks) does not apply.
bool defines_parameter(const ScheduleOptions& options, const std::string& name);
// Whether the schedule takes its device count from the command (-p, or the command's default): a
// built-in's name (or auto) without -D p=N. A file, or a p defined, makes the program say.
bool devices_from_command(const ScheduleOptions& options);

// A schedule and, when it came from a program, the program's source map.
struct LoadedSchedule {
  Schedule schedule;
  std::optional<CompiledProgram> program;
};
// Loads without validating; throws Error (unknown name, bad or missing file naming it, program errors).
LoadedSchedule load_schedule_spec(const ScheduleOptions& options, const CompileOptions& compile = {});
// The validator's findings as lines; for a program, each points at the line that emitted the action.
std::vector<std::string> describe(const LoadedSchedule& loaded, const std::vector<Diagnostic>& diagnostics);
// Throws Error "SPEC: invalid schedule (N errors)" with the findings, one per line, when validation finds any.
void require_valid(const LoadedSchedule& loaded, const std::string& spec);
// Loads the schedule and checks it; throws Error (unknown name, bad file, invalid schedule).
Schedule load_checked_schedule(const ScheduleOptions& options);

}  // namespace flexpipe
