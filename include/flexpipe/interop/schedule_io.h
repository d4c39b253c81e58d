// Reads a schedule named on the command line: a built-in name or a file, by extension
// (.fps: a program, .csv: PyTorch's CSV, .json: FlexPipe schedule JSON). schedule_source is the one
// rule every command applies to tell them apart.
#pragma once
#include <string>

#include "flexpipe/interop/pytorch_csv.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/schedules/builtin.h"

namespace flexpipe {

// What a schedule argument names.
enum class ScheduleSource {
  Builtin,       // a built-in's name (`flexpipe schedules`), compiled from its program
  Auto,          // "auto": train's automatic choice, not a schedule itself (loading it is an unknown name)
  Program,       // a program file, .fps
  PytorchCsv,    // .csv
  ScheduleJson,  // .json
  OtherFile,     // a path or a name with another extension (or none): loading it says what is expected
};
// The rule: a path separator ('/' or '\\') or an extension makes a file, whose extension (in any case)
// says its format; "auto" is train's choice; anything else is a built-in's name. Reads no file: a
// missing one is an error when it is loaded, naming it.
ScheduleSource schedule_source(const std::string& spec);
bool is_schedule_file(ScheduleSource source);
bool looks_like_file(const std::string& spec);  // is_schedule_file(schedule_source(spec))
Schedule load_schedule(const std::string& spec, const ScheduleParams& params, const CsvReadOptions& csv = {});
// Writes by extension: .csv (PyTorch, compute-only unless the schedule is lowered), .json.
void save_schedule(const Schedule& schedule, const std::string& path);

}  // namespace flexpipe
