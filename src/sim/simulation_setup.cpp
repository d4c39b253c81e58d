// Before the event loop: the schedule's and cost table's shape checked, every action's indices and
// receives checked in one pass that also records what the handlers read about each (stage,
// micro-batch), the per-stage cost records, the links, and the event table sized and cleared.
#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "simulation.h"

namespace flexpipe::sim {

bool Simulation::prepare() {
  if (std::string problem = schedule_shape_problem(schedule_); !problem.empty())
    return fail(SimStatus::Malformed, std::move(problem));
  if (std::string problem =
          cost_table_problem(costs_, schedule_.stages_per_pipeline, schedule_.num_devices, "cost table");
      !problem.empty())
    return fail(SimStatus::Malformed, std::move(problem));
  const int devices = schedule_.num_devices;
  const int stages = schedule_.num_stages();
  const int microbatches = schedule_.num_microbatches;
  layout_ = KeyLayout{stages, microbatches, kNumFixedSlots + static_cast<int>(schedule_.custom_ops.size())};

  work_.facts.assign(static_cast<size_t>(stages) * microbatches, 0);
  work_.split_stage.assign(stages, 0);
  work_.device_offset.assign(devices + 1, 0);
  if (!scan_actions()) return false;
  prepare_stages();

  const int64_t events = layout_.size();
  work_.event_time.assign(events, -1.0);
  work_.first_waiter.assign(events, -1);
  work_.next_waiter.assign(devices, -1);
  work_.blocked_on.assign(devices, -1);
  work_.position.assign(devices, 0);
  for (auto* times : {&work_.clock, &work_.busy, &work_.side_free, &work_.host_out_free, &work_.host_in_free})
    times->assign(devices, 0.0);
  work_.compute_memory.resize(devices);
  work_.async_memory.resize(devices);
  for (int d = 0; d < devices; ++d) {
    work_.compute_memory[d].clear();
    work_.async_memory[d].clear();
  }
  if (rendezvous_) {
    work_.handed_over.assign(2 * work_.facts.size(), 0.0);
    work_.receive_posted.assign(2 * work_.facts.size(), 0.0);
  }
  if (track_held_) {
    work_.held.assign(work_.facts.size(), 0.0);
    work_.offloaded.assign(work_.facts.size(), 0.0);
  }
  if (std::string problem = build_custom_waits(schedule_, layout_, work_.device_offset, work_.custom_waits);
      !problem.empty())
    return fail(SimStatus::Malformed, std::move(problem));
  has_custom_waits_ = !work_.custom_waits.empty();

  result_.devices.assign(devices, DeviceReport{});
  if (options_.record_timeline) {
    result_.timeline.resize(devices);
    for (int d = 0; d < devices; ++d) result_.timeline[d].assign(schedule_.device_actions[d].size(), Interval{});
    result_.transfers.reserve(transfers_);
  }
  return true;
}

// The pass before simulating, in list order: every action's indices in range, a RECV before each
// consumer of a remote producer, and the facts the handlers read. False when the schedule cannot run.
bool Simulation::scan_actions() {
  transfers_ = 0;
  for (int d = 0; d < schedule_.num_devices; ++d) {
    const auto& list = schedule_.device_actions[d];
    work_.device_offset[d + 1] = work_.device_offset[d] + static_cast<int64_t>(list.size());
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      if (!action_plainly_fine(schedule_, d, a))
        if (std::string problem = action_problem(schedule_, d, i, a); !problem.empty())
          return fail(SimStatus::Malformed, std::move(problem));
      auto mark = [&](int stage, int microbatch, uint8_t fact) { work_.facts[fact_index(stage, microbatch)] |= fact; };
      switch (a.kind) {
        case ActionKind::F:
          if (!forward_received(d, i, a, a.stage, a.microbatch)) return false;
          break;
        case ActionKind::B:
        case ActionKind::I:
          if (!backward_received(d, i, a, a.stage, a.microbatch)) return false;
          if (a.kind == ActionKind::I) {
            mark(a.stage, a.microbatch, kSplit);
            work_.split_stage[a.stage] = 1;
          }
          break;
        case ActionKind::Overlap:
          if (!forward_received(d, i, a, a.stage, a.microbatch) || !backward_received(d, i, a, a.stage2, a.microbatch2))
            return false;
          if (a.sub_kind == ActionKind::I) {
            mark(a.stage2, a.microbatch2, kSplit);
            work_.split_stage[a.stage2] = 1;
          }
          break;
        case ActionKind::RecvF: mark(a.stage, a.microbatch, kForwardReceivePosted); break;
        case ActionKind::RecvB: mark(a.stage, a.microbatch, kGradReceivePosted); break;
        case ActionKind::R: mark(a.stage, a.microbatch, kRecomputed); break;
        case ActionKind::Offload:
          mark(a.stage, a.microbatch, kOffloaded);
          track_held_ = true;
          ++transfers_;
          if (costs_.host_link.bandwidth == 0)
            return fail(SimStatus::Malformed,
                        fmt::format("device {} offloads (OFFLOAD of stage {}), but the cost table has no host link "
                                    "(\"host_link\": null)",
                                    d, a.stage));
          break;
        case ActionKind::SendF:
        case ActionKind::SendB:
        case ActionKind::Reload: ++transfers_; break;
        case ActionKind::Custom: transfers_ += schedule_.custom_ops[a.custom].communicates; break;
        default: break;
      }
    }
  }
  return true;
}

// From a RECV's start to the arrival of a message handed over before it: the rendezvous, then the
// bytes over the bandwidth.
static double rendezvous_time(const Link& link, double bytes) {
  return link.rendezvous > 0 ? link.rendezvous + link.transfer_time(bytes) - link.latency : 0.0;
}

void Simulation::prepare_stages() {
  const int devices = schedule_.num_devices;
  const int stages = schedule_.num_stages();
  const auto& placement = schedule_.stage_device;
  work_.link_pairs.clear();
  for (int s = 0; s < stages; ++s) {
    if (!schedule_.is_last_stage(s) && placement[s + 1] != placement[s])
      work_.link_pairs.push_back(static_cast<int64_t>(placement[s]) * devices + placement[s + 1]);
    if (!schedule_.is_first_stage(s) && placement[s - 1] != placement[s])
      work_.link_pairs.push_back(static_cast<int64_t>(placement[s]) * devices + placement[s - 1]);
  }
  std::sort(work_.link_pairs.begin(), work_.link_pairs.end());
  work_.link_pairs.erase(std::unique(work_.link_pairs.begin(), work_.link_pairs.end()), work_.link_pairs.end());
  work_.link_free.assign(work_.link_pairs.size(), 0.0);
  work_.links.clear();
  rendezvous_ = false;
  for (int64_t pair : work_.link_pairs) {
    work_.links.push_back(&costs_.link_between(static_cast<int>(pair / devices), static_cast<int>(pair % devices)));
    rendezvous_ = rendezvous_ || work_.links.back()->rendezvous > 0;
  }
  auto link_id = [&](int src, int dst) {
    const int64_t pair = static_cast<int64_t>(src) * devices + dst;
    return static_cast<int32_t>(std::lower_bound(work_.link_pairs.begin(), work_.link_pairs.end(), pair) -
                                work_.link_pairs.begin());
  };

  // Stages whose backward is split rebuild everything at R; the scan is skipped when no stage could
  // rebuild less.
  const std::vector<char> split_backward =
      std::any_of(costs_.stages.begin(), costs_.stages.end(),
                  [](const StageCosts& c) { return c.rebuilt_peak_bytes < c.activation_bytes; })
          ? split_backward_stages(schedule_)
          : std::vector<char>(stages, 0);

  work_.stages.assign(stages, StageInfo{});
  for (int s = 0; s < stages; ++s) {
    const StageCosts& cost = costs_.stages[schedule_.chunk_of_stage(s)];
    StageInfo& info = work_.stages[s];
    info.device = placement[s];
    info.first = schedule_.is_first_stage(s);
    info.last = schedule_.is_last_stage(s);
    info.previous_local = !info.first && placement[s - 1] == info.device;
    info.next_local = !info.last && placement[s + 1] == info.device;
    info.forward = cost.forward;
    info.backward = cost.backward;
    info.backward_input = cost.backward_input;
    info.backward_weight = cost.backward_weight;
    info.recompute = cost.recompute;
    info.optimizer = cost.optimizer;
    info.activation = cost.activation_bytes;
    info.freed_by_input = cost.freed_by_input;
    info.checkpoint = cost.checkpoint_bytes;
    info.checkpoint_until_weight = cost.checkpoint_until_weight;
    info.rebuilt = cost.rebuilt_bytes(split_backward[s]);
    info.offload = cost.offload_bytes;
    info.workspace = cost.workspace_bytes;
    // A SEND to `peer` of `bytes` over the link this device sends to it on.
    auto outgoing = [&](int peer, double bytes) {
      OutgoingMessage message;
      message.link = link_id(info.device, placement[peer]);
      const Link& link = *work_.links[message.link];
      message.bytes = bytes;
      message.occupancy = link.transfer_time(bytes) - link.latency;
      message.latency = link.latency;
      message.send_cpu = link.send_cpu_time(bytes);
      return message;
    };
    if (!info.last && !info.next_local) {
      const Link& back = costs_.link_between(placement[s + 1], info.device);
      info.sends[kActivation] = outgoing(s + 1, cost.output_bytes);
      info.backward_receive_cpu = back.receive_cpu_time(cost.output_bytes);
      info.grad_rendezvous = rendezvous_time(back, cost.output_bytes);
    }
    if (!info.first && !info.previous_local) {
      const double bytes = costs_.stages[schedule_.chunk_of_stage(s - 1)].output_bytes;
      const Link& in = costs_.link_between(placement[s - 1], info.device);
      info.sends[kGradient] = outgoing(s - 1, bytes);
      info.forward_receive_cpu = in.receive_cpu_time(bytes);
      info.forward_rendezvous = rendezvous_time(in, bytes);
    }
  }
}

// A consumer whose producer is on another device needs a RECV before it in its list: the
// simulator times transfers only where a lowered schedule makes them explicit.
bool Simulation::forward_received(int device, int position, const Action& consumer, int stage, int microbatch) {
  const int previous = schedule_.prev_stage(stage);
  if (previous < 0 || schedule_.stage_device[previous] == device ||
      (work_.facts[fact_index(stage, microbatch)] & kForwardReceivePosted))
    return true;
  return receive_missing(device, position, consumer, Action::make(ActionKind::F, previous, microbatch), "RECV_F");
}

bool Simulation::backward_received(int device, int position, const Action& consumer, int stage, int microbatch) {
  const int next = schedule_.next_stage(stage);
  if (next < 0 || schedule_.stage_device[next] == device ||
      (work_.facts[fact_index(stage, microbatch)] & kGradReceivePosted))
    return true;
  return receive_missing(device, position, consumer, Action::make(backward_kind(next, microbatch), next, microbatch),
                         "RECV_B");
}

bool Simulation::receive_missing(int device, int position, const Action& consumer, const Action& producer,
                                 std::string_view receive) {
  return fail(SimStatus::NotLowered,
              fmt::format("device {} #{} {}: needs {} from device {} but no {} precedes it: simulate a lowered "
                          "schedule",
                          device, position, schedule_.action_name(consumer), schedule_.action_name(producer),
                          schedule_.stage_device[producer.stage], receive));
}

// B or I: the kind of (stage, micro-batch)'s backward in the schedule, for naming it in messages.
ActionKind Simulation::backward_kind(int stage, int microbatch) const {
  for (const Action& a : schedule_.device_actions[schedule_.stage_device[stage]]) {
    const bool split_half = a.kind == ActionKind::Overlap && a.sub_kind == ActionKind::I && a.stage2 == stage &&
                            a.microbatch2 == microbatch;
    if (split_half || (a.kind == ActionKind::I && a.stage == stage && a.microbatch == microbatch)) return ActionKind::I;
  }
  return ActionKind::B;
}

}  // namespace flexpipe::sim
