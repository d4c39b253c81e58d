// flexpipe check: every problem of a schedule, not only the first. Exit 1 when it finds any.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct CheckOptions {
  ScheduleOptions schedule;
  bool json = false;
};

int run(const CheckOptions& o) {
  const LoadedSchedule loaded = load_schedule_spec(o.schedule);
  const Schedule& schedule = loaded.schedule;
  const std::vector<Diagnostic> diagnostics = validate(schedule);
  const std::vector<std::string> lines = describe(loaded, diagnostics);
  const std::string& file = o.schedule.spec;
  if (o.json) {
    nlohmann::json errors = nlohmann::json::array();
    for (size_t i = 0; i < diagnostics.size(); ++i) {
      const Diagnostic& d = diagnostics[i];
      nlohmann::json error = {{"device", d.device},
                              {"position", d.position},
                              {"action", d.action},
                              {"message", d.message}};
      if (loaded.program && d.device >= 0 && d.position >= 0) {
        const SourceLocation at = loaded.program->map.at(d.device, d.position);
        if (at.line > 0) error["line"] = at.line, error["column"] = at.column;
      }
      errors.push_back(error);
    }
    nlohmann::json out = {{"file", file},
                          {"valid", diagnostics.empty()},
                          {"devices", schedule.num_devices},
                          {"stages", schedule.num_stages()},
                          {"microbatches", schedule.num_microbatches},
                          {"actions", schedule.num_actions()},
                          {"errors", errors}};
    fmt::print("{}\n", out.dump(2));
  } else if (diagnostics.empty()) {
    fmt::print("{}: valid: {} devices, {} stages, {} micro-batches, {} actions\n", file, schedule.num_devices,
               schedule.num_stages(), schedule.num_microbatches, schedule.num_actions());
  } else {
    // A program's lines already start with file:line:col. --json lists every error; text stops at a
    // screenful and counts the rest.
    const std::string prefix = loaded.program ? "" : file + ": ";
    for (size_t i = 0; i < lines.size() && i < kMaxPrintedErrors; ++i) fmt::print("{}{}\n", prefix, lines[i]);
    if (lines.size() > kMaxPrintedErrors) fmt::print("{}: {}\n", file, more_errors(lines.size() - kMaxPrintedErrors));
    fmt::print("{}: {} error{}\n", file, diagnostics.size(), diagnostics.size() == 1 ? "" : "s");
  }
  return diagnostics.empty() ? kExitSuccess : kExitProblemsFound;
}
}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand("check", "Validate a schedule and report every error (exit 1 when invalid)");
  auto o = std::make_shared<CheckOptions>();
  add_schedule_options(command, o->schedule);
  command->add_flag("--json", o->json, "Print the result as JSON");
  command->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace flexpipe::cli
