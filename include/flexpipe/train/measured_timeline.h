#pragma once
// A schedule as it really ran: per-device action times recorded by the runtime, turned into the
// simulator's result type so that the same views (grid, SVG, Perfetto trace, report) draw it, and
// into a cost table of measured per-stage action times, so that the simulator's prediction for the
// same costs can be printed next to the measurement.
#include <cstdint>
#include <vector>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/sim/simulator.h"

namespace flexpipe {

// One executed action of a device, in milliseconds since the step began (all devices share that
// origin: a barrier). `wait` is the part spent blocked on a peer, at the start of the action.
struct MeasuredAction {
  int32_t index = 0;  // position in the device's lowered list
  double start = 0;
  double end = 0;
  double wait = 0;
};

// Intervals start after the wait; busy time counts compute actions only; makespan is the last end.
// Throws Error when an index is out of range for the device's list.
SimResult measured_result(const Schedule& lowered, const std::vector<std::vector<MeasuredAction>>& devices);

// Per model chunk, the mean measured time (wait excluded) of each compute kind; kinds never run keep
// the derived defaults (B = I + W, R = F). Links cost nothing: the prediction isolates the schedule.
CostTable measured_costs(const Schedule& lowered, const std::vector<std::vector<MeasuredAction>>& devices);

// The schedule with each custom operation kind's duration set to its mean measured time (the
// simulator reads custom durations from the schedule, not from the cost table).
Schedule with_measured_custom_durations(Schedule lowered, const std::vector<std::vector<MeasuredAction>>& devices);

}  // namespace flexpipe
