#pragma once
// Ways to look at a simulated schedule: a text grid, an SVG timeline with memory curves, a
// Chrome/Perfetto trace and the JSON report.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/sim/simulator.h"

namespace flexpipe {

// Devices x time: one row per device, one column per time step of `step` units (0: the shortest
// compute action), each cell the action running then; '.' is idle.
std::string render_grid(const Schedule& schedule, const SimResult& result, double step = 0);
// Devices x action order, without times: what `flexpipe show` prints for an unsimulated schedule.
std::string render_order(const Schedule& schedule);
std::string render_svg(const Schedule& schedule, const SimResult& result);
// Chrome trace JSON. Timestamps are microseconds: a time unit of "s", "ms", "us" or "ns" converts
// exactly; any other unit (the default "unit") is drawn as one millisecond.
std::string render_trace(const Schedule& schedule, const SimResult& result, const std::string& time_unit = "unit");
nlohmann::json report_json(const Schedule& schedule, const CostTable& costs, const SimResult& result);
std::string render_report(const Schedule& schedule, const CostTable& costs, const SimResult& result);

// A line chart of values[i] against step first_step + i (a training loss curve): axes with round
// ticks, the curve as one polyline. Throws Error when there is nothing to draw.
std::string render_curve_svg(const std::string& title, const std::string& y_label, const std::vector<double>& values,
                             int first_step = 0);

}  // namespace flexpipe
