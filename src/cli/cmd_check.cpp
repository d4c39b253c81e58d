// flexpipe check: every problem of a schedule file, not only the first.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "flexpipe/core/schedule_io.h"
#include "flexpipe/core/validator.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct CheckOptions {
  std::string file;
  std::string lettering = "detect";
  bool json = false;
};

int run(const CheckOptions& o) {
  CsvReadOptions csv;
  csv.lettering = o.lettering == "legacy"    ? CsvLettering::Legacy
                  : o.lettering == "current" ? CsvLettering::Current
                                             : CsvLettering::Detect;
  const Schedule schedule = load_schedule(o.file, ScheduleParams{}, csv);
  const std::vector<Diagnostic> diagnostics = validate(schedule);
  if (o.json) {
    nlohmann::json errors = nlohmann::json::array();
    for (const Diagnostic& d : diagnostics)
      errors.push_back({{"device", d.device}, {"position", d.position}, {"action", d.action}, {"message", d.message}});
    nlohmann::json out = {{"file", o.file},
                          {"valid", diagnostics.empty()},
                          {"devices", schedule.num_devices},
                          {"stages", schedule.num_stages()},
                          {"microbatches", schedule.num_microbatches},
                          {"actions", schedule.num_actions()},
                          {"errors", errors}};
    fmt::print("{}\n", out.dump(2));
  } else if (diagnostics.empty()) {
    fmt::print("{}: valid: {} devices, {} stages, {} micro-batches, {} actions\n", o.file, schedule.num_devices,
               schedule.num_stages(), schedule.num_microbatches, schedule.num_actions());
  } else {
    for (const Diagnostic& d : diagnostics) fmt::print("{}: {}\n", o.file, d.to_string());
    fmt::print("{}: {} error{}\n", o.file, diagnostics.size(), diagnostics.size() == 1 ? "" : "s");
  }
  return diagnostics.empty() ? 0 : 1;
}
}  // namespace

void add_check_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand("check", "Validate a schedule file and report every error (exit 1 when invalid)");
  auto o = std::make_shared<CheckOptions>();
  command->add_option("file", o->file, "Schedule file (.csv, .json) or built-in name")->required();
  command->add_option("--lettering", o->lettering, "PyTorch CSV lettering: detect, current or legacy")
      ->check(CLI::IsMember({"detect", "current", "legacy"}));
  command->add_flag("--json", o->json, "Print the result as JSON");
  command->callback([o, &exit_code] { exit_code = run(*o); });
}

}  // namespace flexpipe::cli
