// flexpipe simulate: time and memory of a schedule under a cost table.
#include <fmt/format.h>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/files.h"
#include "flexpipe/views/views.h"
#include "options.h"

namespace flexpipe::cli {

namespace {
struct SimulateOptions {
  ScheduleOptions schedule;
  CostOptions costs;
  std::string plan;
  bool json = false;
  bool grid = false;
  std::string svg;
  std::string trace;
};

void run(const SimulateOptions& o) {
  Schedule schedule = load_checked_schedule(o.schedule);
  CostTable costs;
  if (o.plan.empty()) {
    costs = load_costs(o.costs, schedule);
  } else {
    AppliedPlan applied = apply_plan_file(o.plan, schedule, o.costs.memory_limit.value);
    schedule = std::move(applied.schedule);
    costs = std::move(applied.costs);
    apply_topology(o.costs, costs);
  }
  // A file that already spells out its communication is simulated as written.
  const Schedule lowered = schedule.has_communication() ? schedule : lower(schedule);
  const SimResult result = simulate(lowered, costs);
  if (!o.svg.empty()) write_text_file(o.svg, render_svg(lowered, result, {costs.time_unit}));
  if (!o.trace.empty()) write_text_file(o.trace, render_trace(lowered, result, costs.time_unit));
  if (o.json) {
    nlohmann::json report = report_json(lowered, costs, result);
    if (!o.svg.empty()) report["svg"] = o.svg;
    if (!o.trace.empty()) report["trace"] = o.trace;
    fmt::print("{}\n", report.dump(2));
    return;
  }
  fmt::print("{}", render_report(lowered, costs, result, byte_units_of(o.costs.memory_limit)));
  if (o.grid) fmt::print("\n{}", render_grid(lowered, result));
  if (!o.svg.empty()) fmt::print("SVG timeline: {}\n", o.svg);
  if (!o.trace.empty()) fmt::print("Perfetto trace: {}\n", o.trace);
}
}  // namespace

void add_simulate_command(CLI::App& app, int&) {
  auto* command =
      app.add_subcommand("simulate", "Simulate a schedule with costs and memory; report time, bubble and peak memory");
  auto o = std::make_shared<SimulateOptions>();
  add_schedule_options(command, o->schedule);
  add_cost_options(command, o->costs);
  command
      ->add_option("--plan", o->plan,
                   "A partition plan (flexpipe partition -o): model, operator ranges, recompute "
                   "and offload applied to this schedule")
      ->excludes("--costs")
      ->excludes("--model");
  command->add_flag("--json", o->json, "Print the report as JSON");
  command->add_flag("--grid", o->grid, "Also print the devices x time text grid");
  command->add_option("--svg", o->svg, "Write an SVG timeline with memory curves to this file");
  command->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace JSON to this file");
  command->callback([o] { run(*o); });
}

}  // namespace flexpipe::cli
