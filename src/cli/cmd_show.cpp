// flexpipe show: one schedule in one form (text grid, action order, PyTorch CSV, JSON, a program,
// SVG, trace), or, for a program, where each action came from.
#include <fmt/format.h>

#include "flexpipe/interop/pytorch_csv.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/interop/schedule_json.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/lang/writer.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/views/views.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct ShowOptions {
  ScheduleOptions schedule;
  CostOptions costs;
  std::string format = "grid";
  std::string output;
  bool lowered = false;
  bool explain = false;
  bool steps = false;
};

std::string simulated_view(const ShowOptions& o, const Schedule& schedule, const std::string& format) {
  const CostTable costs = load_costs(o.costs, schedule);
  const Schedule simulated = schedule.has_communication() ? schedule : lower(schedule);
  const SimResult result = simulate(simulated, costs);
  if (format == "grid") return render_grid(simulated, result);
  if (format == "svg") return render_svg(simulated, result, {costs.time_unit});
  return render_trace(simulated, result, costs.time_unit);
}

// Each device's actions next to the program line that emitted them, then the timed grid.
std::string explain(const ShowOptions& o, const LoadedSchedule& loaded) {
  if (!loaded.program) throw Error(fmt::format("{}: --explain needs a program (.fps)", o.schedule.spec));
  const Schedule& s = loaded.schedule;
  const SourceMap& map = loaded.program->map;
  std::string text;
  for (int d = 0; d < s.num_devices; ++d) {
    text += fmt::format("device {}:\n", d);
    for (size_t i = 0; i < s.device_actions[d].size(); ++i) {
      const SourceLocation at = map.at(d, static_cast<int>(i));
      std::string source = at.line > 0 && at.line <= static_cast<int>(map.lines.size()) ? map.lines[at.line - 1] : "";
      source.erase(0, source.find_first_not_of(" \t"));
      text += fmt::format("  #{:<4} {:<14} {}:{}:{}  {}\n", i, s.action_name(s.device_actions[d][i]), map.origin,
                          at.line, at.column, source);
    }
  }
  return text + "\n" + simulated_view(o, s, "grid");
}

std::string render(const ShowOptions& o) {
  CompileOptions compile;
  compile.trace = o.steps;
  LoadedSchedule loaded = load_schedule_spec(o.schedule, compile);
  if (o.steps) {
    if (!loaded.program) throw Error(fmt::format("{}: --steps needs a program (.fps)", o.schedule.spec));
    std::string text;
    for (const std::string& step : loaded.program->trace) text += step + "\n";
    return text;
  }
  require_valid(loaded, o.schedule.spec);
  if (o.explain) return explain(o, loaded);
  Schedule schedule = o.lowered ? lower(loaded.schedule) : loaded.schedule;
  if (o.format == "order") return render_order(schedule);
  if (o.format == "csv") return write_pytorch_csv(schedule);
  if (o.format == "json") return write_schedule_json(schedule);
  if (o.format == "program") return write_program(schedule);
  if (o.format == "explicit-program") return write_program(schedule, ProgramStyle::Explicit);
  return simulated_view(o, schedule, o.format);
}
}  // namespace

void add_show_command(CLI::App& app, int&) {
  auto* command =
      app.add_subcommand("show",
                         "Print or write a schedule as a grid, action lists, CSV, JSON, a program, SVG or trace");
  auto o = std::make_shared<ShowOptions>();
  add_schedule_options(command, o->schedule);
  add_cost_options(command, o->costs);
  command
      ->add_option("-f,--format", o->format,
                   "grid (timed), order, csv (PyTorch), json, program (.fps: runs as repeat, K(s) for a stage's next "
                   "micro-batch), explicit-program (.fps: every action with its micro-batch), svg, trace")
      ->check(CLI::IsMember({"grid", "order", "csv", "json", "program", "explicit-program", "svg", "trace"}));
  command->add_option("-o,--output", o->output, "Write to this file instead of standard output");
  command->add_flag("--lowered", o->lowered, "Show the lowered form (explicit SEND/RECV)");
  command->add_flag("--explain", o->explain, "For a program: each action with the line that emitted it, then the grid");
  command->add_flag("--steps", o->steps, "For a program: every emitted action in emission order, with its line");
  command->callback([o] {
    const std::string text = render(*o);
    if (o->output.empty())
      fmt::print("{}", text);
    else
      write_text_file(o->output, text);
  });
}

}  // namespace flexpipe::cli
