// A run's recorded action times as the simulator's result, and the costs and transport read off them.
#include "flexpipe/train/measured_timeline.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/statistics.h"

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

std::vector<MeasuredMessage> measured_messages(const Schedule& lowered, const MeasuredStep& step) {
  check_indices(lowered, step);
  // Per (kind of SEND, sending stage, micro-batch): the message's record, filled from both ends.
  std::map<std::tuple<ActionKind, int, int>, MeasuredMessage> found;
  std::map<std::tuple<ActionKind, int, int>, int> parts;
  for (size_t d = 0; d < step.size(); ++d)
    for (const MeasuredAction& m : step[d]) {
      const Action& a = lowered.device_actions[d][m.index];
      const int device = static_cast<int>(d);
      auto remote = [&](int stage) { return lowered.stage_device[stage] != device; };
      if (a.kind == ActionKind::SendF || a.kind == ActionKind::SendB) {
        MeasuredMessage& message = found[{a.kind, a.stage, a.microbatch}];
        message.gradient = a.kind == ActionKind::SendB;
        message.sender = device;
        message.sent = m.start;
        message.handed_over = m.end;
        ++parts[{a.kind, a.stage, a.microbatch}];
      } else if (a.kind == ActionKind::RecvF) {
        found[{ActionKind::SendF, a.stage - 1, a.microbatch}].posted = m.start;
        ++parts[{ActionKind::SendF, a.stage - 1, a.microbatch}];
      } else if (a.kind == ActionKind::RecvB) {
        found[{ActionKind::SendB, a.stage + 1, a.microbatch}].posted = m.start;
        ++parts[{ActionKind::SendB, a.stage + 1, a.microbatch}];
      } else if (a.kind == ActionKind::F && !lowered.is_first_stage(a.stage) && remote(a.stage - 1)) {
        MeasuredMessage& message = found[{ActionKind::SendF, a.stage - 1, a.microbatch}];
        message.receiver = device;
        message.arrived = m.start + m.wait;
        message.waited = m.wait;
        ++parts[{ActionKind::SendF, a.stage - 1, a.microbatch}];
      } else if ((a.kind == ActionKind::B || a.kind == ActionKind::I) && !lowered.is_last_stage(a.stage) &&
                 remote(a.stage + 1)) {
        MeasuredMessage& message = found[{ActionKind::SendB, a.stage + 1, a.microbatch}];
        message.receiver = device;
        message.arrived = m.start + m.wait;
        message.waited = m.wait;
        ++parts[{ActionKind::SendB, a.stage + 1, a.microbatch}];
      }
    }
  // An OVERLAP consumes two messages at once, and which one it waited for is not known: only
  // messages seen at their SEND, their RECV and a lone consumer are kept.
  std::vector<MeasuredMessage> result;
  for (const auto& [key, message] : found)
    if (parts[key] == 3) result.push_back(message);
  return result;
}

namespace {

std::vector<double> clock_offsets(const std::vector<MeasuredMessage>& messages, int devices) {
  // Per ordered pair of devices, the least time from a SEND beginning on one to its consumer
  // having the data on the other: the shortest one-way delay plus the difference of their origins.
  std::vector<double> least(static_cast<size_t>(devices) * devices, kInfinity);
  for (const MeasuredMessage& message : messages) {
    double& bound = least[static_cast<size_t>(message.sender) * devices + message.receiver];
    bound = std::min(bound, message.arrived - message.sent);
  }
  // Taking the shortest delay to be the same both ways, the origins differ by half the difference
  // of the two directions' bounds; devices are reached from device 0 over pairs that talk both ways.
  std::vector<double> offset(devices, 0.0);
  std::vector<char> reached(devices, 0);
  std::vector<int> frontier{0};
  if (devices > 0) reached[0] = 1;
  while (!frontier.empty()) {
    const int a = frontier.back();
    frontier.pop_back();
    for (int b = 0; b < devices; ++b) {
      const double there = least[static_cast<size_t>(a) * devices + b];
      const double back = least[static_cast<size_t>(b) * devices + a];
      if (reached[b] || there == kInfinity || back == kInfinity) continue;
      offset[b] = offset[a] + (back - there) / 2;
      reached[b] = 1;
      frontier.push_back(b);
    }
  }
  return offset;
}

}  // namespace

std::vector<double> clock_offsets(const Schedule& lowered, const MeasuredStep& step) {
  return clock_offsets(measured_messages(lowered, step), static_cast<int>(step.size()));
}

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

CostTable measured_costs(const Schedule& lowered, const std::vector<MeasuredStep>& steps) {
  for (const MeasuredStep& step : steps) check_indices(lowered, step);
  const int chunks = lowered.stages_per_pipeline;
  constexpr int kKinds = kNumActionKinds;
  std::vector<std::vector<double>> times(static_cast<size_t>(chunks) * kKinds);
  std::vector<double> sends, receives, eager_flights, rendezvous_flights;
  std::vector<std::pair<const Action*, double>> overlaps;  // each OVERLAP and its time
  for (const MeasuredStep& step : steps) {
    for (size_t d = 0; d < step.size(); ++d)
      for (const MeasuredAction& m : step[d]) {
        const Action& a = lowered.device_actions[d][m.index];
        const double time = std::max(0.0, m.end - m.start - m.wait);
        if (a.kind == ActionKind::SendF || a.kind == ActionKind::SendB) sends.push_back(time);
        if (a.kind == ActionKind::RecvF || a.kind == ActionKind::RecvB) receives.push_back(time);
        if (a.kind == ActionKind::Overlap) overlaps.emplace_back(&a, time);
        if (a.kind == ActionKind::Overlap || !is_compute(a.kind) || a.kind == ActionKind::Opt) continue;
        times[static_cast<size_t>(lowered.chunk_of_stage(a.stage)) * kKinds + static_cast<size_t>(a.kind)].push_back(
            time);
      }
    const std::vector<MeasuredMessage> messages = measured_messages(lowered, step);
    const std::vector<double> origin = clock_offsets(messages, static_cast<int>(step.size()));
    for (const MeasuredMessage& message : messages) {
      if (message.waited <= 0) continue;  // only a consumer that waited tells when its data came
      const double handed_over = message.handed_over + origin[message.sender];
      const double posted = message.posted + origin[message.receiver];
      const double arrived = message.arrived + origin[message.receiver];
      if (posted > handed_over)
        rendezvous_flights.push_back(arrived - posted);
      else
        eager_flights.push_back(arrived - handed_over);
    }
  }
  auto mean_of = [&](int chunk, ActionKind kind, double fallback) {
    std::vector<double>& values = times[static_cast<size_t>(chunk) * kKinds + static_cast<size_t>(kind)];
    return values.empty() ? fallback : mean(values);
  };
  CostTable table;
  table.time_unit = "ms";
  table.memory_unit = "bytes";
  for (int c = 0; c < chunks; ++c) {
    StageCosts s;
    s.forward = mean_of(c, ActionKind::F, 0);
    s.backward_input = mean_of(c, ActionKind::I, 0);
    s.backward_weight = mean_of(c, ActionKind::W, 0);
    s.backward = mean_of(c, ActionKind::B, s.backward_input + s.backward_weight);
    if (s.backward_input == 0 && s.backward_weight == 0) s.backward_input = s.backward_weight = s.backward / 2;
    s.recompute = mean_of(c, ActionKind::R, s.forward);
    s.activation_bytes = 0;
    table.stages.push_back(s);
  }
  // An OVERLAP's time against its halves' when they run alone: the table's overlap_ratio.
  double overlapped = 0, alone = 0;
  for (const auto& [a, time] : overlaps) {
    const StageCosts& backward = table.stages[lowered.chunk_of_stage(a->stage2)];
    overlapped += time;
    alone += table.stages[lowered.chunk_of_stage(a->stage)].forward +
             (a->sub_kind == ActionKind::I ? backward.backward_input : backward.backward);
  }
  if (overlapped > 0 && alone > 0) table.overlap_ratio = overlapped / alone;
  table.link = Link{};
  table.link.send_cpu = sends.empty() ? 0 : mean(sends);
  table.link.receive_cpu = receives.empty() ? 0 : mean(receives);
  if (!eager_flights.empty()) table.link.latency = std::max(0.0, mean(eager_flights));
  if (!rendezvous_flights.empty()) table.link.rendezvous = std::max(0.0, mean(rendezvous_flights));
  table.host_link = Link{};
  return table;
}

std::vector<TimeBreakdown> measured_breakdown(const Schedule& lowered, const MeasuredStep& step) {
  check_indices(lowered, step);
  const double makespan = measured_result(lowered, step).makespan;
  std::vector<TimeBreakdown> parts(step.size());
  for (size_t d = 0; d < step.size(); ++d) {
    TimeBreakdown& p = parts[d];
    double previous_end = 0;
    for (const MeasuredAction& m : step[d]) {
      const double time = std::max(0.0, m.end - m.start - m.wait);
      (counts_as_busy(lowered, lowered.device_actions[d][m.index]) ? p.compute : p.transfer) += time;
      p.waiting += m.wait;
      p.overhead += std::max(0.0, m.start - previous_end);
      previous_end = std::max(previous_end, m.end);
    }
    p.waiting += makespan - previous_end;
  }
  return parts;
}

std::vector<TimeBreakdown> simulated_breakdown(const Schedule& lowered, const SimResult& simulated) {
  std::vector<TimeBreakdown> parts(simulated.timeline.size());
  for (size_t d = 0; d < parts.size(); ++d) {
    TimeBreakdown& p = parts[d];
    for (size_t i = 0; i < simulated.timeline[d].size(); ++i) {
      const Interval& interval = simulated.timeline[d][i];
      (counts_as_busy(lowered, lowered.device_actions[d][i]) ? p.compute : p.transfer) += interval.end - interval.start;
    }
    p.waiting = simulated.makespan - p.compute - p.transfer;
  }
  return parts;
}

Schedule with_measured_custom_durations(Schedule lowered, const std::vector<MeasuredStep>& steps) {
  std::vector<std::vector<double>> times(lowered.custom_ops.size());
  for (const MeasuredStep& step : steps) {
    check_indices(lowered, step);
    for (size_t d = 0; d < step.size(); ++d)
      for (const MeasuredAction& m : step[d]) {
        const Action& a = lowered.device_actions[d][m.index];
        if (a.kind == ActionKind::Custom) times[a.custom].push_back(std::max(0.0, m.end - m.start - m.wait));
      }
  }
  for (size_t k = 0; k < lowered.custom_ops.size(); ++k)
    if (!times[k].empty()) lowered.custom_ops[k].duration = mean(times[k]);
  return lowered;
}

}  // namespace flexpipe
