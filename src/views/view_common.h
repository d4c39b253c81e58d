// Internal: what the views (grid, SVG, trace, report) share about reading a simulated schedule.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/ir/schedule.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"

namespace flexpipe::views {

// Whether the action occupies its device's compute stream (custom kinds say so in their declaration).
inline bool on_compute_stream(const Schedule& schedule, const Action& action) {
  if (action.kind == ActionKind::Custom)
    return action.custom >= schedule.custom_ops.size() || !schedule.custom_ops[action.custom].communicates;
  return is_compute(action.kind);
}

// Stage -> its rank among the stages its device holds (0: the device's first chunk).
inline std::vector<int> chunk_on_device(const Schedule& schedule) {
  std::vector<int> held(schedule.num_devices, 0);
  std::vector<int> chunk(schedule.stage_device.size(), 0);
  for (size_t s = 0; s < schedule.stage_device.size(); ++s) {
    const int device = schedule.stage_device[s];
    if (device >= 0 && device < schedule.num_devices) chunk[s] = held[device]++;
  }
  return chunk;
}

inline int chunk_of(const std::vector<int>& chunks, int stage) {
  return stage >= 0 && stage < static_cast<int>(chunks.size()) ? chunks[stage] : 0;
}

// The views read result.timeline by the schedule's indices; a result of another schedule, or one
// simulated without a timeline, cannot be drawn.
inline void require_timeline(const Schedule& schedule, const SimResult& result, std::string_view view) {
  if (schedule.device_actions.size() != static_cast<size_t>(schedule.num_devices))
    throw Error(fmt::format("{}: schedule '{}' has {} devices but action lists for {}", view, schedule.name,
                            schedule.num_devices, schedule.device_actions.size()));
  if (result.timeline.size() != static_cast<size_t>(schedule.num_devices))
    throw Error(fmt::format("{}: the simulation result has a timeline for {} devices but schedule '{}' has {}{}", view,
                            result.timeline.size(), schedule.name, schedule.num_devices,
                            result.timeline.empty() ? " (was it simulated without recording the timeline?)" : ""));
  if (!std::isfinite(result.makespan) || result.makespan < 0)
    throw Error(fmt::format("{}: the simulation result's makespan is {}", view, result.makespan));
  for (int d = 0; d < schedule.num_devices; ++d)
    if (result.timeline[d].size() != schedule.device_actions[d].size())
      throw Error(fmt::format("{}: device {} has {} actions but its simulated timeline has {}", view, d,
                              schedule.device_actions[d].size(), result.timeline[d].size()));
}

inline void require_device_reports(const Schedule& schedule, const SimResult& result, std::string_view view) {
  if (result.devices.size() != static_cast<size_t>(schedule.num_devices))
    throw Error(fmt::format("{}: the simulation result reports {} devices but schedule '{}' has {}", view,
                            result.devices.size(), schedule.name, schedule.num_devices));
}

// The shortest positive duration of a compute action; 0 when there is none.
inline double shortest_compute_duration(const Schedule& schedule, const SimResult& result) {
  double shortest = 0;
  for (int d = 0; d < schedule.num_devices; ++d)
    for (size_t i = 0; i < schedule.device_actions[d].size(); ++i) {
      if (!on_compute_stream(schedule, schedule.device_actions[d][i])) continue;
      const double length = result.timeline[d][i].end - result.timeline[d][i].start;
      if (length > 0 && (shortest == 0 || length < shortest)) shortest = length;
    }
  return shortest;
}

// Integers without a fraction, everything else with 6 significant digits: "12", "2.5", "1.5e+10".
inline std::string format_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == std::floor(value) && std::abs(value) < 1e15) return fmt::format("{}", static_cast<int64_t>(value));
  return fmt::format("{:.6g}", value);
}

}  // namespace flexpipe::views
