// Reads a schedule named on the command line: a built-in name or a file, by extension
// (.csv: PyTorch's CSV, .json: FlexPipe schedule JSON).
#pragma once
#include <string>

#include "flexpipe/interop/pytorch_csv.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/schedules/builtin.h"

namespace flexpipe {

bool looks_like_file(const std::string& spec);  // has an extension or a path separator
Schedule load_schedule(const std::string& spec, const ScheduleParams& params, const CsvReadOptions& csv = {});
// Writes by extension: .csv (PyTorch, compute-only unless the schedule is lowered), .json.
void save_schedule(const Schedule& schedule, const std::string& path);

}  // namespace flexpipe
