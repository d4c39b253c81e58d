// flexpipe show: one schedule in one form (text grid, action order, PyTorch CSV, JSON, SVG, trace).
#include <fmt/format.h>

#include "flexpipe/core/lowering.h"
#include "flexpipe/core/pytorch_csv.h"
#include "flexpipe/core/schedule_io.h"
#include "flexpipe/core/schedule_json.h"
#include "flexpipe/core/simulator.h"
#include "flexpipe/core/views.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct ShowOptions {
  ScheduleOptions schedule;
  CostOptions costs;
  std::string format = "grid";
  std::string output;
  bool lowered = false;
};

std::string render(const ShowOptions& o) {
  Schedule schedule = load_checked_schedule(o.schedule);
  if (o.lowered) schedule = lower(schedule);
  if (o.format == "order") return render_order(schedule);
  if (o.format == "csv") return write_pytorch_csv(schedule);
  if (o.format == "json") return schedule_to_json(schedule).dump(2) + "\n";
  // The timed views need a simulation.
  const CostTable costs = load_costs(o.costs, schedule);
  const Schedule simulated = schedule.has_communication() ? schedule : lower(schedule);
  const SimResult result = simulate(simulated, costs);
  if (o.format == "grid") return render_grid(simulated, result);
  if (o.format == "svg") return render_svg(simulated, result);
  return render_trace(simulated, result, costs.time_unit);
}
}  // namespace

void add_show_command(CLI::App& app, int&) {
  auto* command = app.add_subcommand("show", "Print or write a schedule as a grid, action lists, CSV, JSON, SVG or trace");
  auto o = std::make_shared<ShowOptions>();
  add_schedule_options(command, o->schedule);
  add_cost_options(command, o->costs);
  command->add_option("-f,--format", o->format, "grid (timed), order, csv (PyTorch), json, svg, trace")
      ->check(CLI::IsMember({"grid", "order", "csv", "json", "svg", "trace"}));
  command->add_option("-o,--output", o->output, "Write to this file instead of standard output");
  command->add_flag("--lowered", o->lowered, "Show the lowered form (explicit SEND/RECV)");
  command->callback([o] {
    const std::string text = render(*o);
    if (o->output.empty())
      fmt::print("{}", text);
    else
      write_text_file(o->output, text);
  });
}

}  // namespace flexpipe::cli
