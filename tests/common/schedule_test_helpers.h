// Helpers shared by the built-in schedule family tests: building by name, reading a device's order,
// and simulating with uniform costs.
#pragma once
#include <algorithm>
#include <string>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"

namespace flexpipe::test {

constexpr double kTolerance = 1e-9;

// A device's actions as one line of cell names, e.g. "0F0 0F1 0B0".
inline std::string row(const Schedule& schedule, int device) {
  std::string out;
  for (const Action& action : schedule.device_actions[device]) {
    if (!out.empty()) out += ' ';
    out += schedule.action_name(action);
  }
  return out;
}

inline Schedule build(const std::string& name, int p, int m, int v = 0) { return make_builtin(name, {p, m, v}); }

// The message make_builtin throws, or "" when it builds.
inline std::string build_error(const std::string& name, int p, int m, int v = 0) {
  try {
    build(name, p, m, v);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

inline SimResult run(const Schedule& schedule, const CostTable& costs) { return simulate(lower(schedule), costs); }

// Idle time between a device's first compute start and its last compute end.
inline double gaps_inside_window(const Schedule& lowered, const SimResult& result, int device) {
  double first = kInfinity, last = -kInfinity;
  const auto& actions = lowered.device_actions[device];
  for (size_t k = 0; k < actions.size(); ++k) {
    if (!is_compute(actions[k].kind)) continue;
    first = std::min(first, result.timeline[device][k].start);
    last = std::max(last, result.timeline[device][k].end);
  }
  return (last - first) - result.devices[device].busy;
}

}  // namespace flexpipe::test
