// Schedules named on the command line: a built-in name, or a file read and written by its extension.
#include "flexpipe/interop/schedule_io.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include <fmt/format.h>

#include "flexpipe/interop/schedule_json.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/lang/writer.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe {

namespace {
std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

std::string describe_extension(const std::string& ext) {
  return ext.empty() ? std::string("a file without extension") : fmt::format("'{}'", ext);
}

}  // namespace

ScheduleSource schedule_source(const std::string& spec) {
  if (spec == "auto") return ScheduleSource::Auto;
  const bool file = spec.find('/') != std::string::npos || spec.find('\\') != std::string::npos ||
                    std::filesystem::path(spec).has_extension();
  if (!file) return ScheduleSource::Builtin;
  const std::string ext = lower_extension(spec);
  if (ext == ".fps") return ScheduleSource::Program;
  if (ext == ".csv") return ScheduleSource::PytorchCsv;
  if (ext == ".json") return ScheduleSource::ScheduleJson;
  return ScheduleSource::OtherFile;
}

bool is_schedule_file(ScheduleSource source) {
  return source != ScheduleSource::Builtin && source != ScheduleSource::Auto;
}

bool looks_like_file(const std::string& spec) { return is_schedule_file(schedule_source(spec)); }

Schedule load_schedule(const std::string& spec, const ScheduleParams& params, const CsvReadOptions& csv) {
  switch (schedule_source(spec)) {
    case ScheduleSource::Builtin:
    case ScheduleSource::Auto: return compile_builtin(spec, params).schedule;
    case ScheduleSource::PytorchCsv: return load_pytorch_csv(spec, csv);
    case ScheduleSource::ScheduleJson: return parse_schedule_json(read_text_file(spec), spec);
    case ScheduleSource::Program: return load_program(spec).schedule;
    case ScheduleSource::OtherFile: break;
  }
  throw Error(fmt::format("{}: cannot load a schedule from {} (expected .fps, .csv for PyTorch's CSV or .json)", spec,
                          describe_extension(lower_extension(spec))));
}

void save_schedule(const Schedule& schedule, const std::string& path) {
  const std::string ext = lower_extension(path);
  if (ext == ".csv") return write_text_file(path, write_pytorch_csv(schedule));
  if (ext == ".json") return write_text_file(path, write_schedule_json(schedule));
  if (ext == ".fps") return write_text_file(path, write_program(schedule));
  throw Error(fmt::format("{}: cannot save a schedule as {} (expected .fps, .csv for PyTorch's CSV or .json)", path,
                          describe_extension(ext)));
}

}  // namespace flexpipe
