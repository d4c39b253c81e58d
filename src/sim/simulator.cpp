// Event-driven simulation of a lowered schedule (docs/simulator.md).
//
// Every device walks its list in order; an action that needs an event whose time is not known yet
// (a transfer another device has not posted, say) parks its device on that event's key, and the
// event's producer wakes it. An action is taken up again at most once per event it waits for, so
// the work is linear in the schedule's size. Times do not depend on the order devices are visited in: a
// device's actions run in list order, and each link or side stream is fed by one device only.
#include "flexpipe/sim/simulator.h"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "simulation.h"

namespace flexpipe {
namespace sim {

static Workspace& workspace() {
  thread_local Workspace reused;
  return reused;
}

void Simulation::advance(int device) {
  const std::vector<Action>& list = schedule_.device_actions[device];
  const int size = static_cast<int>(list.size());
  Cursor at{device, work_.position[device], work_.clock[device], work_.busy[device]};
  while (at.position < size && step(at, list[at.position])) ++at.position;
  work_.position[device] = at.position;
  work_.clock[device] = at.clock;
  work_.busy[device] = at.busy;
}

bool Simulation::wait_forward_input(int device, int stage, int microbatch, double& ready) {
  const StageInfo& info = work_.stages[stage];
  if (info.first) return true;
  if (info.previous_local) return wait(device, key(stage - 1, microbatch, kForwardDone), ready);
  if (!wait(device, key(stage, microbatch, kForwardArrived), ready)) return false;
  wait_rendezvous(message_index(stage, microbatch, false), info.forward_rendezvous, ready);
  return true;
}

bool Simulation::wait_backward_input(int device, int stage, int microbatch, double& ready) {
  const StageInfo& info = work_.stages[stage];
  const uint8_t facts = work_.facts[fact_index(stage, microbatch)];
  if (!info.last) {
    const int64_t gradient =
        info.next_local ? key(stage + 1, microbatch, kInputGradDone) : key(stage, microbatch, kGradArrived);
    if (!wait(device, gradient, ready)) return false;
    if (!info.next_local) wait_rendezvous(message_index(stage, microbatch, true), info.grad_rendezvous, ready);
  }
  if (!wait(device, key(stage, microbatch, kForwardDone), ready)) return false;
  if ((facts & kRecomputed) && !wait(device, key(stage, microbatch, kRecomputeDone), ready)) return false;
  if ((facts & kOffloaded) && !wait(device, key(stage, microbatch, kReloadDone), ready)) return false;
  return true;
}

// Takes up one action: false (device parked) when an event it needs is not known yet.
bool Simulation::step(Cursor& at, const Action& a) {
  double ready = at.clock;
  if (has_custom_waits_)
    for (int64_t event : work_.custom_waits.of(work_.device_offset[at.device] + at.position))
      if (!wait(at.device, event, ready)) return false;
  switch (a.kind) {
    case ActionKind::F: return forward(at, a, ready);
    case ActionKind::B:
    case ActionKind::I: return backward(at, a, ready);
    case ActionKind::W: return weight_gradient(at, a, ready);
    case ActionKind::R: return recompute(at, a, ready);
    case ActionKind::Opt:
      produce(key(a.stage, layout_.stage_wide_column(), kOptimizerDone),
              compute(at, ready, work_.stages[a.stage].optimizer));
      return true;
    case ActionKind::Overlap: return overlap(at, a, ready);
    case ActionKind::SendF: return send(at, a, ready, kActivation);
    case ActionKind::SendB: return send(at, a, ready, kGradient);
    case ActionKind::RecvF:
    case ActionKind::RecvB: receive(at, a, ready); return true;
    case ActionKind::Offload: return offload(at, a, ready);
    case ActionKind::Reload: return reload(at, a, ready);
    case ActionKind::Custom: custom(at, a, ready); return true;
  }
  return true;
}

bool Simulation::forward(Cursor& at, const Action& a, double ready) {
  const int s = a.stage, m = a.microbatch;
  if (!wait_forward_input(at.device, s, m, ready)) return false;
  change_activation(at.device, ready, s, m, forward_allocation(s, m));
  const StageInfo& info = work_.stages[s];
  produce(key(s, m, kForwardDone), compute(at, ready, info.forward, info.workspace));
  return true;
}

bool Simulation::backward(Cursor& at, const Action& a, double ready) {
  const int s = a.stage, m = a.microbatch;
  if (!wait_backward_input(at.device, s, m, ready)) return false;
  const StageInfo& info = work_.stages[s];
  const bool whole = a.kind == ActionKind::B;
  const double end = compute(at, ready, whole ? info.backward : info.backward_input, info.workspace);
  change_activation(at.device, end, s, m, -backward_release(a.kind, s, m));
  produce(key(s, m, kInputGradDone), end);
  if (whole) produce(key(s, m, kWeightGradDone), end);
  return true;
}

bool Simulation::weight_gradient(Cursor& at, const Action& a, double ready) {
  const int s = a.stage, m = a.microbatch;
  if (!wait(at.device, key(s, m, kInputGradDone), ready)) return false;
  const StageInfo& info = work_.stages[s];
  const double end = compute(at, ready, info.backward_weight, info.workspace);
  const bool recomputed = work_.facts[fact_index(s, m)] & kRecomputed;
  const double checkpoint = recomputed && info.checkpoint_until_weight ? info.checkpoint : 0.0;
  change_activation(at.device, end, s, m, -(info.activation - info.freed_by_input + checkpoint));
  produce(key(s, m, kWeightGradDone), end);
  return true;
}

bool Simulation::recompute(Cursor& at, const Action& a, double ready) {
  const int s = a.stage, m = a.microbatch;
  if (!wait(at.device, key(s, m, kForwardDone), ready)) return false;
  if ((work_.facts[fact_index(s, m)] & kOffloaded) && !wait(at.device, key(s, m, kReloadDone), ready)) return false;
  const StageInfo& info = work_.stages[s];
  change_activation(at.device, ready, s, m, info.rebuilt);
  produce(key(s, m, kRecomputeDone), compute(at, ready, info.recompute, info.workspace));
  return true;
}

bool Simulation::overlap(Cursor& at, const Action& a, double ready) {
  const int s = a.stage, m = a.microbatch, s2 = a.stage2, m2 = a.microbatch2;
  if (!wait_forward_input(at.device, s, m, ready)) return false;
  if (!wait_backward_input(at.device, s2, m2, ready)) return false;
  const StageInfo& forward = work_.stages[s];
  const StageInfo& backward = work_.stages[s2];
  const double backward_time = a.sub_kind == ActionKind::I ? backward.backward_input : backward.backward;
  change_activation(at.device, ready, s, m, forward_allocation(s, m));
  const double end = compute(at, ready, costs_.overlap_ratio * (forward.forward + backward_time),
                             forward.workspace + backward.workspace);
  change_activation(at.device, end, s2, m2, -backward_release(a.sub_kind, s2, m2));
  produce(key(s, m, kForwardDone), end);
  produce(key(s2, m2, kInputGradDone), end);
  if (a.sub_kind == ActionKind::B) produce(key(s2, m2, kWeightGradDone), end);
  return true;
}

// A SEND leaves once its stage has computed what it sends and the sender's host has handed it over;
// it arrives as the peer stage's input (SEND_F) or output gradient (SEND_B).
bool Simulation::send(Cursor& at, const Action& a, double ready, Direction direction) {
  const int s = a.stage, m = a.microbatch;
  const bool gradient = direction == kGradient;
  if (!wait(at.device, key(s, m, gradient ? kInputGradDone : kForwardDone), ready)) return false;
  const OutgoingMessage& message = work_.stages[s].sends[direction];
  const int peer = gradient ? s - 1 : s + 1;
  const double posted = occupy_host(at.device, at.position, ready, message.send_cpu, at.clock);
  const Interval sent = transfer(at.device, at.position, at.device, work_.stages[peer].device, posted,
                                 message.occupancy, message.latency, message.bytes, work_.link_free[message.link]);
  if (rendezvous_) work_.handed_over[message_index(peer, m, gradient)] = posted;
  produce(key(peer, m, gradient ? kGradArrived : kForwardArrived), sent.end);
  result_.comm_bytes += message.bytes;
  ++result_.comm_transfers;
  return true;
}

// A RECV was checked before simulating; its consumer waits for the transfer. It takes host time, and
// over a link with a rendezvous its start is when the sender's message may leave.
void Simulation::receive(Cursor& at, const Action& a, double ready) {
  const bool gradient = a.kind == ActionKind::RecvB;
  if (rendezvous_) work_.receive_posted[message_index(a.stage, a.microbatch, gradient)] = ready;
  const StageInfo& info = work_.stages[a.stage];
  occupy_host(at.device, at.position, ready, gradient ? info.backward_receive_cpu : info.forward_receive_cpu, at.clock);
}

bool Simulation::offload(Cursor& at, const Action& a, double ready) {
  const int s = a.stage, m = a.microbatch;
  if (!wait(at.device, key(s, m, kForwardDone), ready)) return false;
  // What the stage's operators decided Offload saved, at most what (s,m) holds now.
  const double bytes = std::min(work_.held[fact_index(s, m)], work_.stages[s].offload);
  work_.offloaded[fact_index(s, m)] = bytes;
  const Interval moved = transfer(at.device, at.position, at.device, -1, ready, costs_.host_link.transfer_time(bytes),
                                  0, bytes, work_.host_out_free[at.device]);
  work_.async_memory[at.device].push_back({moved.end, -bytes});
  produce(key(s, m, kOffloadDone), moved.end);
  record(at.device, at.position, at.clock, at.clock);
  return true;
}

bool Simulation::reload(Cursor& at, const Action& a, double ready) {
  const int s = a.stage, m = a.microbatch;
  if (!wait(at.device, key(s, m, kOffloadDone), ready)) return false;
  const double bytes = work_.offloaded[fact_index(s, m)];
  const Interval moved = transfer(at.device, at.position, -1, at.device, ready, costs_.host_link.transfer_time(bytes),
                                  0, bytes, work_.host_in_free[at.device]);
  work_.async_memory[at.device].push_back({moved.start, bytes});
  produce(key(s, m, kReloadDone), moved.end);
  record(at.device, at.position, at.clock, at.clock);
  return true;
}

// A custom action runs on the device's side stream when it communicates, else on its compute stream.
void Simulation::custom(Cursor& at, const Action& a, double ready) {
  const CustomOpKind& op = schedule_.custom_ops[a.custom];
  const int column = op.per_microbatch ? a.microbatch : layout_.stage_wide_column();
  const int64_t event = key(a.stage, column, kNumFixedSlots + a.custom);
  if (op.communicates) {
    const Interval ran =
        transfer(at.device, at.position, at.device, at.device, ready, op.duration, 0, 0, work_.side_free[at.device]);
    if (op.memory != 0) work_.async_memory[at.device].push_back({op.memory > 0 ? ran.start : ran.end, op.memory});
    produce(event, ran.end);
    record(at.device, at.position, at.clock, at.clock);
  } else {
    const double end = compute(at, ready, op.duration);
    if (op.memory != 0) work_.compute_memory[at.device].push_back({op.memory > 0 ? ready : end, op.memory});
    produce(event, end);
  }
}

std::string Simulation::describe_event(int64_t event) const {
  const int stage = layout_.stage_of(event);
  const int column = layout_.column_of(event);
  const int microbatch = column < schedule_.num_microbatches ? column : -1;
  const int slot = layout_.slot_of(event);
  const bool split = microbatch >= 0 && (work_.facts[fact_index(stage, microbatch)] & kSplit);
  Action producer;
  switch (slot) {
    case kForwardDone: producer = Action::make(ActionKind::F, stage, microbatch); break;
    case kInputGradDone: producer = Action::make(split ? ActionKind::I : ActionKind::B, stage, microbatch); break;
    case kWeightGradDone: producer = Action::make(split ? ActionKind::W : ActionKind::B, stage, microbatch); break;
    case kRecomputeDone: producer = Action::make(ActionKind::R, stage, microbatch); break;
    case kForwardArrived: producer = Action::make(ActionKind::SendF, stage - 1, microbatch); break;
    case kGradArrived: producer = Action::make(ActionKind::SendB, stage + 1, microbatch); break;
    case kOffloadDone: producer = Action::make(ActionKind::Offload, stage, microbatch); break;
    case kReloadDone: producer = Action::make(ActionKind::Reload, stage, microbatch); break;
    case kOptimizerDone: producer = Action::make(ActionKind::Opt, stage); break;
    default: producer = Action::custom_op(static_cast<uint16_t>(slot - kNumFixedSlots), stage, microbatch); break;
  }
  return schedule_.action_name(producer);
}

bool Simulation::deadlocked() {
  std::string blocked;
  for (int d = 0; d < schedule_.num_devices; ++d) {
    const int position = work_.position[d];
    if (position == static_cast<int>(schedule_.device_actions[d].size())) continue;
    blocked +=
        fmt::format("\ndevice {} #{} {}: waits for {}", d, position,
                    schedule_.action_name(schedule_.device_actions[d][position]), describe_event(work_.blocked_on[d]));
  }
  if (blocked.empty()) return false;
  fail(SimStatus::Deadlocked,
       "deadlock: every unfinished device waits for an action that cannot run before it" + blocked);
  return true;
}

void Simulation::finish() {
  const int devices = schedule_.num_devices;
  double makespan = last_transfer_end_;
  double busiest = 0;
  for (int d = 0; d < devices; ++d) {
    makespan = std::max(makespan, work_.clock[d]);
    busiest = std::max(busiest, work_.busy[d]);
  }
  result_.makespan = makespan;

  std::vector<double>& static_memory = work_.static_memory;
  static_memory.assign(devices, 0.0);
  for (int s = 0; s < schedule_.num_stages(); ++s) {
    const StageCosts& cost = costs_.stages[schedule_.chunk_of_stage(s)];
    static_memory[schedule_.stage_device[s]] += cost.parameter_bytes + cost.gradient_bytes + cost.optimizer_bytes;
  }

  double idle = 0;
  result_.fits = true;
  for (int d = 0; d < devices; ++d) {
    DeviceReport& report = result_.devices[d];
    report.busy = work_.busy[d];
    report.idle = makespan - report.busy;
    report.static_memory = static_memory[d];
    report.capacity = costs_.capacity(d);
    summarize_memory(work_.compute_memory[d], work_.async_memory[d], options_.record_memory, report);
    report.fits = report.peak_memory <= report.capacity;
    result_.fits = result_.fits && report.fits;
    idle += report.idle;
  }
  result_.bubble_ratio = makespan > 0 ? idle / (devices * makespan) : 0.0;
  result_.lower_bound = std::max(busiest, critical_path(schedule_, costs_, work_.split_stage));
  result_.efficiency = makespan > 0 ? result_.lower_bound / makespan : 1.0;
}

}  // namespace sim

SimOutcome try_simulate(const Schedule& lowered, const CostTable& costs, const SimOptions& options) {
  SimOutcome outcome;
  sim::Simulation simulation(lowered, costs, options, sim::workspace(), outcome.result);
  if (simulation.run()) {
    outcome.status = outcome.result.fits ? SimStatus::Ok : SimStatus::OverMemory;
  } else {
    outcome.status = simulation.status();
    outcome.message = std::move(simulation.message());
    outcome.result = {};
  }
  return outcome;
}

SimResult simulate(const Schedule& lowered, const CostTable& costs, const SimOptions& options) {
  SimOutcome outcome = try_simulate(lowered, costs, options);
  if (!outcome.ran()) throw Error(outcome.message);
  return std::move(outcome.result);
}

}  // namespace flexpipe