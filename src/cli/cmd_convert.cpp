// flexpipe convert: between PyTorch's CSV (either lettering), FlexPipe's schedule JSON and programs,
// and between the compute-only and the compute+comms forms.
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/ir/lowering.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct ConvertOptions {
  ScheduleOptions schedule;
  std::string output;
  std::string form = "keep";
};
}  // namespace

void add_convert_command(CLI::App& app, int&) {
  auto* command =
      app.add_subcommand("convert", "Convert a schedule between PyTorch CSV, FlexPipe JSON and a program (.fps)");
  auto o = std::make_shared<ConvertOptions>();
  add_schedule_options(command, o->schedule);
  command->add_option("-o,--output", o->output, "Output file; its extension picks the format (.csv, .json, .fps)")
      ->required();
  command->add_option("--form", o->form, "keep, compute-only or lowered (compute+comms)")
      ->check(CLI::IsMember({"keep", "compute-only", "lowered"}));
  command->callback([o] {
    Schedule schedule = load_checked_schedule(o->schedule);
    if (o->form == "compute-only") schedule = strip_communication(schedule);
    if (o->form == "lowered") schedule = lower(schedule);
    save_schedule(schedule, o->output);
  });
}

}  // namespace flexpipe::cli
