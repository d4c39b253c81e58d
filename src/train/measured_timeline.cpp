#include "flexpipe/train/measured_timeline.h"

#include <algorithm>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

void check_indices(const Schedule& lowered, const std::vector<std::vector<MeasuredAction>>& devices) {
  if (devices.size() != lowered.device_actions.size())
    throw Error(fmt::format("measured timeline: {} devices recorded for a schedule of {}", devices.size(),
                            lowered.device_actions.size()));
  for (size_t d = 0; d < devices.size(); ++d)
    for (const MeasuredAction& m : devices[d])
      if (m.index < 0 || m.index >= static_cast<int32_t>(lowered.device_actions[d].size()))
        throw Error(fmt::format("measured timeline: device {} recorded action {} but its list has {}", d, m.index,
                                lowered.device_actions[d].size()));
}

bool counts_as_busy(const Schedule& lowered, const Action& a) {
  if (a.kind == ActionKind::Custom) return !lowered.custom_ops[a.custom].communicates;
  return is_compute(a.kind);
}

}  // namespace

SimResult measured_result(const Schedule& lowered, const std::vector<std::vector<MeasuredAction>>& devices) {
  check_indices(lowered, devices);
  SimResult result;
  result.timeline.resize(devices.size());
  result.devices.resize(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    result.timeline[d].assign(lowered.device_actions[d].size(), Interval{});
    for (const MeasuredAction& m : devices[d]) {
      const Interval interval{std::min(m.start + m.wait, m.end), m.end};
      result.timeline[d][m.index] = interval;
      result.makespan = std::max(result.makespan, m.end);
      if (counts_as_busy(lowered, lowered.device_actions[d][m.index]))
        result.devices[d].busy += interval.end - interval.start;
    }
  }
  double idle = 0;
  for (DeviceReport& device : result.devices) {
    device.idle = result.makespan - device.busy;
    idle += device.idle;
  }
  if (result.makespan > 0) result.bubble_ratio = idle / (double(devices.size()) * result.makespan);
  return result;
}

CostTable measured_costs(const Schedule& lowered, const std::vector<std::vector<MeasuredAction>>& devices) {
  check_indices(lowered, devices);
  const int chunks = lowered.stages_per_pipeline;
  constexpr int kKinds = kNumActionKinds;
  std::vector<double> sum(static_cast<size_t>(chunks) * kKinds, 0.0), count(sum.size(), 0.0);
  auto add = [&](ActionKind kind, int stage, double time) {
    const size_t slot = static_cast<size_t>(lowered.chunk_of_stage(stage)) * kKinds + static_cast<size_t>(kind);
    sum[slot] += time;
    count[slot] += 1;
  };
  for (size_t d = 0; d < devices.size(); ++d)
    for (const MeasuredAction& m : devices[d]) {
      const Action& a = lowered.device_actions[d][m.index];
      const double time = std::max(0.0, m.end - m.start - m.wait);
      if (a.kind == ActionKind::Overlap) continue;  // both halves in one interval: not attributable
      if (is_compute(a.kind) && a.kind != ActionKind::Opt) add(a.kind, a.stage, time);
    }
  auto mean = [&](int chunk, ActionKind kind, double fallback) {
    const size_t slot = static_cast<size_t>(chunk) * kKinds + static_cast<size_t>(kind);
    return count[slot] > 0 ? sum[slot] / count[slot] : fallback;
  };
  CostTable table;
  table.time_unit = "ms";
  table.memory_unit = "bytes";
  for (int c = 0; c < chunks; ++c) {
    StageCosts s;
    s.forward = mean(c, ActionKind::F, 0);
    s.backward_input = mean(c, ActionKind::I, 0);
    s.backward_weight = mean(c, ActionKind::W, 0);
    s.backward = mean(c, ActionKind::B, s.backward_input + s.backward_weight);
    if (s.backward_input == 0 && s.backward_weight == 0) s.backward_input = s.backward_weight = s.backward / 2;
    s.recompute = mean(c, ActionKind::R, s.forward);
    s.activation_bytes = 0;
    table.stages.push_back(s);
  }
  table.link = Link{0, kInfinity};
  table.host_link = Link{0, kInfinity};
  return table;
}

Schedule with_measured_custom_durations(Schedule lowered, const std::vector<std::vector<MeasuredAction>>& devices) {
  check_indices(lowered, devices);
  std::vector<double> sum(lowered.custom_ops.size(), 0.0), count(lowered.custom_ops.size(), 0.0);
  for (size_t d = 0; d < devices.size(); ++d)
    for (const MeasuredAction& m : devices[d]) {
      const Action& a = lowered.device_actions[d][m.index];
      if (a.kind != ActionKind::Custom) continue;
      sum[a.custom] += std::max(0.0, m.end - m.start - m.wait);
      count[a.custom] += 1;
    }
  for (size_t k = 0; k < lowered.custom_ops.size(); ++k)
    if (count[k] > 0) lowered.custom_ops[k].duration = sum[k] / count[k];
  return lowered;
}

}  // namespace flexpipe
