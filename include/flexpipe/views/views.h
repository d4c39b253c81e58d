// Ways to look at a simulated schedule: a text grid, an SVG timeline with memory curves, a
// Chrome/Perfetto trace and the JSON report.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/quantity.h"

namespace flexpipe {

// Devices x time: one row per device, one column per time step of `step` units (0: the shortest
// compute action), each cell the action running then; '.' is idle.
std::string render_grid(const Schedule& schedule, const SimResult& result, double step = 0);
// Devices x action order, without times: what `flexpipe show` prints for an unsimulated schedule.
std::string render_order(const Schedule& schedule);
// How an SVG timeline is drawn: the unit its axis and title give times in ("unit": none), and the widest
// it may be for its height (0: as wide as its shortest compute action needs). A measured timeline holds
// actions far shorter than the rest, which would stretch it to a thin strip; it caps the ratio instead.
struct TimelineStyle {
  std::string time_unit = "unit";
  double max_aspect = 0;
};
std::string render_svg(const Schedule& schedule, const SimResult& result, const TimelineStyle& style = {});
// Chrome trace JSON. Timestamps are microseconds: a time unit of "s", "ms", "us" or "ns" converts
// exactly; any other unit (the default "unit") is drawn as one millisecond.
std::string render_trace(const Schedule& schedule, const SimResult& result, const std::string& time_unit = "unit");
nlohmann::json report_json(const Schedule& schedule, const CostTable& costs, const SimResult& result);
// Times carry the table's time unit and sizes its memory unit; a table in bytes prints them as 18.10 GB, or
// in `bytes` units (GiB when the limit was written so). A table in "unit" prints bare numbers.
std::string render_report(const Schedule& schedule, const CostTable& costs, const SimResult& result,
                          ByteUnits bytes = ByteUnits::Decimal);

// A line chart of values[i] against step first_step + i (a training loss curve): axes with round
// ticks, the curve as one polyline. Throws Error when there is nothing to draw.
std::string render_curve_svg(const std::string& title, const std::string& y_label, const std::vector<double>& values,
                             int first_step = 0);

}  // namespace flexpipe
