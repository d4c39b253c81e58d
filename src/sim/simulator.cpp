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
#include "simulator_detail.h"

namespace flexpipe {

namespace {

using detail::KeyLayout;
using detail::MemoryEvent;

// Facts about one (stage, micro-batch) that the pass before simulating finds in the schedule.
enum Fact : uint8_t {
  kRecomputed = 1,            // has an R action: F keeps a checkpoint, R rebuilds the activations
  kOffloaded = 2,             // has an OFFLOAD: the backward (or R) waits for the RELOAD
  kSplit = 4,                 // its backward is I then W
  kForwardReceivePosted = 8,  // a RECV_F has been seen (the pass walks each list in order)
  kGradReceivePosted = 16,
};

// What the inner loop reads about a global stage, in one place.
struct StageInfo {
  int32_t device = 0;
  bool first = false;
  bool last = false;
  bool previous_local = false;  // the previous stage is on the same device: no transfer
  bool next_local = false;
  int32_t forward_link = -1;   // link of this stage's SEND_F
  int32_t backward_link = -1;  // link of this stage's SEND_B
  double forward = 0, backward = 0, backward_input = 0, backward_weight = 0, recompute = 0, optimizer = 0;
  double activation = 0, freed_by_input = 0, checkpoint = 0;
  bool checkpoint_until_weight = false;
  double rebuilt = 0;          // what R holds until the backward ends: the largest segment, or everything when split
  double offload = kInfinity;  // the most one OFFLOAD moves
  double workspace = 0;        // held while any of the stage's computations runs
  // This stage's SEND_F and SEND_B: how long a message holds its link, and how much later it arrives.
  double forward_occupancy = 0, forward_send_bytes = 0, forward_latency = 0;
  double backward_occupancy = 0, backward_send_bytes = 0, backward_latency = 0;
  // Where the links this stage receives its input and its output gradient over have a rendezvous
  // (Link::rendezvous): from the RECV's start to the message's arrival, its bytes over the bandwidth
  // included; 0 without one.
  double forward_rendezvous = 0, grad_rendezvous = 0;
  // Host time of this stage's SEND_F, SEND_B, RECV_F and RECV_B on its device (Link::send_cpu).
  double forward_send_cpu = 0, backward_send_cpu = 0, forward_receive_cpu = 0, backward_receive_cpu = 0;
};

// Buffers reused from one simulation to the next on a thread: the search simulates millions of
// schedules, and after the first few no call allocates except for its result.
struct Workspace {
  std::vector<StageInfo> stages;
  std::vector<int64_t> link_pairs;  // src * devices + dst, sorted; a link's id is its index
  std::vector<const Link*> links;   // per link id: its costs, the override looked up once per pair
  std::vector<double> link_free;
  std::vector<double> event_time;     // per key; negative until produced
  std::vector<int32_t> first_waiter;  // per key; devices parked on it, linked through next_waiter
  std::vector<int32_t> next_waiter;   // per device
  std::vector<int64_t> blocked_on;    // per device
  std::vector<uint8_t> facts;         // per (stage, micro-batch)
  std::vector<double> held;           // per (stage, micro-batch): activation bytes held, when offloading
  std::vector<double> offloaded;      // per (stage, micro-batch): bytes its OFFLOAD moved
  // Per (receiving stage, micro-batch, direction), where a link has a rendezvous: when the message
  // was handed over (its SEND's host time ended) and when its RECV began.
  std::vector<double> handed_over, receive_posted;
  std::vector<uint8_t> split_stage;
  std::vector<int32_t> position;
  std::vector<double> clock, busy, side_free, host_out_free, host_in_free, static_memory;
  std::vector<std::vector<MemoryEvent>> compute_memory, async_memory;
  std::vector<int32_t> runnable;
  std::vector<int64_t> device_offset;
  detail::CustomWaits custom_waits;
};

Workspace& workspace() {
  thread_local Workspace reused;
  return reused;
}

class Simulation {
 public:
  Simulation(const Schedule& schedule, const CostTable& costs, const SimOptions& options, Workspace& work,
             SimResult& result)
      : schedule_(schedule), costs_(costs), options_(options), work_(work), result_(result) {}

  // False when the schedule cannot run: status() and message() say why.
  bool run() {
    if (!prepare()) return false;
    work_.runnable.clear();
    for (int d = schedule_.num_devices - 1; d >= 0; --d) work_.runnable.push_back(d);
    while (!work_.runnable.empty()) {
      const int device = work_.runnable.back();
      work_.runnable.pop_back();
      advance(device);
    }
    if (deadlocked()) return false;
    finish();
    return true;
  }
  SimStatus status() const { return status_; }
  std::string& message() { return message_; }

 private:
  int64_t key(int stage, int column, int slot) const { return layout_.key(stage, column, slot); }
  size_t fact_index(int stage, int microbatch) const {
    return static_cast<size_t>(stage) * schedule_.num_microbatches + microbatch;
  }

  bool prepare();
  void prepare_stages();
  void advance(int device);
  bool step(int device, int position, const Action& action, double& clock, double& busy);
  bool deadlocked();
  void finish();

  // Records why the schedule cannot run; returns false for the caller to return.
  bool fail(SimStatus status, std::string message) {
    status_ = status;
    message_ = std::move(message);
    return false;
  }

  // Parks the device on `key` unless the event is known; else moves `ready` to it.
  bool wait(int device, int64_t event, double& ready) {
    const double time = work_.event_time[event];
    if (time < 0) {
      work_.next_waiter[device] = work_.first_waiter[event];
      work_.first_waiter[event] = device;
      work_.blocked_on[device] = event;
      return false;
    }
    ready = std::max(ready, time);
    return true;
  }

  void produce(int64_t event, double time) {
    work_.event_time[event] = time;
    for (int32_t device = work_.first_waiter[event]; device >= 0; device = work_.next_waiter[device])
      work_.runnable.push_back(device);
    work_.first_waiter[event] = -1;
  }

  // Index of the message into (stage, micro-batch): its input (forward) or its output gradient.
  size_t message_index(int stage, int microbatch, bool gradient) const {
    return 2 * fact_index(stage, microbatch) + (gradient ? 1 : 0);
  }
  // Over a link with a rendezvous, a message handed over before its RECV began leaves only then.
  void wait_rendezvous(size_t message, double rendezvous, double& ready) const {
    if (rendezvous > 0 && work_.handed_over[message] < work_.receive_posted[message])
      ready = std::max(ready, work_.receive_posted[message] + rendezvous);
  }
  bool wait_forward_input(int device, int stage, int microbatch, double& ready);
  bool wait_backward_input(int device, int stage, int microbatch, double& ready);
  bool receives_posted(int device, int position, const Action& action);
  ActionKind backward_kind(int stage, int microbatch) const;

  // Activation bytes of (stage, micro-batch) change by `delta` at `time` on the compute stream.
  void change_activation(int device, double time, int stage, int microbatch, double delta) {
    if (delta != 0) work_.compute_memory[device].push_back({time, delta});
    if (track_held_) work_.held[fact_index(stage, microbatch)] += delta;
  }
  double forward_allocation(int stage, int microbatch) const {
    const StageInfo& info = work_.stages[stage];
    return (work_.facts[fact_index(stage, microbatch)] & kRecomputed) ? info.checkpoint : info.activation;
  }
  // What the end of a backward of `kind` (B or I) releases.
  double backward_release(ActionKind kind, int stage, int microbatch) const {
    const StageInfo& info = work_.stages[stage];
    const bool recomputed = work_.facts[fact_index(stage, microbatch)] & kRecomputed;
    if (kind == ActionKind::I)
      return info.freed_by_input + (recomputed && !info.checkpoint_until_weight ? info.checkpoint : 0.0);
    return recomputed ? info.rebuilt + info.checkpoint : info.activation;
  }

  void record(int device, int position, double start, double end) {
    if (options_.record_timeline) result_.timeline[device][position] = {start, end};
  }
  // A transfer's host time on `device` (Link::send_cpu): from `ready`, like a computation but not
  // counted as busy; returns when the host is free again. Without host time the action takes no
  // time and does not move the device's clock.
  double occupy_host(int device, int position, double ready, double duration, double& clock) {
    if (duration <= 0) {
      record(device, position, clock, clock);
      return ready;
    }
    clock = ready + duration;
    record(device, position, ready, clock);
    return clock;
  }
  // Runs a transfer (or an off-stream custom action) on a FIFO channel; returns its interval.
  // Work on a channel (a link, the host link, a side stream) runs after what was posted on it before and
  // holds it for `occupancy`; it is done `latency` later. A message between devices holds its link for
  // its bytes over the bandwidth and arrives a latency after that: latency delays each message but does
  // not queue the next one behind it.
  Interval transfer(int device, int position, int src, int dst, double ready, double occupancy, double latency,
                    double bytes, double& channel_free) {
    const double start = std::max(ready, channel_free);
    channel_free = start + occupancy;
    const Interval interval{start, channel_free + latency};
    last_transfer_end_ = std::max(last_transfer_end_, interval.end);
    if (options_.record_timeline) result_.transfers.push_back({src, dst, device, position, bytes, interval});
    return interval;
  }

  std::string describe_event(int64_t event) const;

  const Schedule& schedule_;
  const CostTable& costs_;
  const SimOptions& options_;
  Workspace& work_;
  SimResult& result_;
  KeyLayout layout_;
  bool track_held_ = false;
  bool rendezvous_ = false;  // some link has one: SENDs and RECVs record their times
  bool has_custom_waits_ = false;
  double last_transfer_end_ = 0;
  SimStatus status_ = SimStatus::Ok;
  std::string message_;
};

bool Simulation::prepare() {
  if (std::string problem = detail::schedule_shape_problem(schedule_); !problem.empty())
    return fail(SimStatus::Malformed, std::move(problem));
  if (std::string problem =
          cost_table_problem(costs_, schedule_.stages_per_pipeline, schedule_.num_devices, "cost table");
      !problem.empty())
    return fail(SimStatus::Malformed, std::move(problem));
  const int devices = schedule_.num_devices;
  const int stages = schedule_.num_stages();
  const int microbatches = schedule_.num_microbatches;
  layout_ = KeyLayout{stages, microbatches, detail::kNumFixedSlots + static_cast<int>(schedule_.custom_ops.size())};

  work_.facts.assign(static_cast<size_t>(stages) * microbatches, 0);
  work_.split_stage.assign(stages, 0);
  work_.device_offset.assign(devices + 1, 0);
  int64_t transfers = 0;
  for (int d = 0; d < devices; ++d) {
    const auto& list = schedule_.device_actions[d];
    work_.device_offset[d + 1] = work_.device_offset[d] + static_cast<int64_t>(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      if (!detail::action_plainly_fine(schedule_, d, a))
        if (std::string problem = detail::action_problem(schedule_, d, static_cast<int>(i), a); !problem.empty())
          return fail(SimStatus::Malformed, std::move(problem));
      if (!receives_posted(d, static_cast<int>(i), a)) return false;
      switch (a.kind) {
        case ActionKind::RecvF: work_.facts[fact_index(a.stage, a.microbatch)] |= kForwardReceivePosted; break;
        case ActionKind::RecvB: work_.facts[fact_index(a.stage, a.microbatch)] |= kGradReceivePosted; break;
        case ActionKind::R: work_.facts[fact_index(a.stage, a.microbatch)] |= kRecomputed; break;
        case ActionKind::Offload: work_.facts[fact_index(a.stage, a.microbatch)] |= kOffloaded; break;
        case ActionKind::I:
          work_.facts[fact_index(a.stage, a.microbatch)] |= kSplit;
          work_.split_stage[a.stage] = 1;
          break;
        case ActionKind::Overlap:
          if (a.sub_kind == ActionKind::I) {
            work_.facts[fact_index(a.stage2, a.microbatch2)] |= kSplit;
            work_.split_stage[a.stage2] = 1;
          }
          break;
        default: break;
      }
      transfers += a.kind == ActionKind::SendF || a.kind == ActionKind::SendB || a.kind == ActionKind::Offload ||
                   a.kind == ActionKind::Reload ||
                   (a.kind == ActionKind::Custom && schedule_.custom_ops[a.custom].communicates);
      track_held_ = track_held_ || a.kind == ActionKind::Offload;
      if (a.kind == ActionKind::Offload && costs_.host_link.bandwidth == 0)
        return fail(SimStatus::Malformed,
                    fmt::format("device {} offloads (OFFLOAD of stage {}), but the cost table has no host link "
                                "(\"host_link\": null)",
                                d, a.stage));
    }
  }
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
  if (std::string problem = detail::build_custom_waits(schedule_, layout_, work_.device_offset, work_.custom_waits);
      !problem.empty())
    return fail(SimStatus::Malformed, std::move(problem));
  has_custom_waits_ = !work_.custom_waits.empty();

  result_.devices.assign(devices, DeviceReport{});
  if (options_.record_timeline) {
    result_.timeline.resize(devices);
    for (int d = 0; d < devices; ++d) result_.timeline[d].assign(schedule_.device_actions[d].size(), Interval{});
    result_.transfers.reserve(transfers);
  }
  return true;
}

// From a RECV's start to the arrival of a message handed over before it: the rendezvous, then the
// bytes over the bandwidth.
double rendezvous_time(const Link& link, double bytes) {
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
    if (!info.last && !info.next_local) {
      info.forward_link = link_id(info.device, placement[s + 1]);
      const Link& out = *work_.links[info.forward_link];
      const Link& back = costs_.link_between(placement[s + 1], info.device);
      info.forward_send_bytes = cost.output_bytes;
      info.forward_occupancy = out.transfer_time(cost.output_bytes) - out.latency;
      info.forward_latency = out.latency;
      info.forward_send_cpu = out.send_cpu_time(cost.output_bytes);
      info.backward_receive_cpu = back.receive_cpu_time(cost.output_bytes);
      info.grad_rendezvous = rendezvous_time(back, cost.output_bytes);
    }
    if (!info.first && !info.previous_local) {
      const double bytes = costs_.stages[schedule_.chunk_of_stage(s - 1)].output_bytes;
      info.backward_link = link_id(info.device, placement[s - 1]);
      const Link& out = *work_.links[info.backward_link];
      const Link& in = costs_.link_between(placement[s - 1], info.device);
      info.backward_send_bytes = bytes;
      info.backward_occupancy = out.transfer_time(bytes) - out.latency;
      info.backward_latency = out.latency;
      info.backward_send_cpu = out.send_cpu_time(bytes);
      info.forward_receive_cpu = in.receive_cpu_time(bytes);
      info.forward_rendezvous = rendezvous_time(in, bytes);
    }
  }
}

void Simulation::advance(int device) {
  const std::vector<Action>& list = schedule_.device_actions[device];
  const int size = static_cast<int>(list.size());
  int position = work_.position[device];
  double clock = work_.clock[device];
  double busy = work_.busy[device];
  while (position < size && step(device, position, list[position], clock, busy)) ++position;
  work_.position[device] = position;
  work_.clock[device] = clock;
  work_.busy[device] = busy;
}

// A consumer whose producer is on another device needs a RECV before it in its list: the
// simulator times transfers only where a lowered schedule makes them explicit.
bool Simulation::receives_posted(int device, int position, const Action& action) {
  auto missing = [&](const Action& producer, std::string_view receive) {
    return fail(SimStatus::NotLowered,
                fmt::format("device {} #{} {}: needs {} from device {} but no {} precedes it: simulate a lowered "
                            "schedule",
                            device, position, schedule_.action_name(action), schedule_.action_name(producer),
                            schedule_.stage_device[producer.stage], receive));
  };
  auto forward_half = [&](int stage, int microbatch) {
    const int previous = schedule_.prev_stage(stage);
    if (previous >= 0 && schedule_.stage_device[previous] != device &&
        !(work_.facts[fact_index(stage, microbatch)] & kForwardReceivePosted))
      return missing(Action::make(ActionKind::F, previous, microbatch), "RECV_F");
    return true;
  };
  auto backward_half = [&](int stage, int microbatch) {
    const int next = schedule_.next_stage(stage);
    if (next >= 0 && schedule_.stage_device[next] != device &&
        !(work_.facts[fact_index(stage, microbatch)] & kGradReceivePosted))
      return missing(Action::make(backward_kind(next, microbatch), next, microbatch), "RECV_B");
    return true;
  };
  if (action.kind == ActionKind::F) return forward_half(action.stage, action.microbatch);
  if (is_backward(action.kind)) return backward_half(action.stage, action.microbatch);
  if (action.kind == ActionKind::Overlap)
    return forward_half(action.stage, action.microbatch) && backward_half(action.stage2, action.microbatch2);
  return true;
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

bool Simulation::wait_forward_input(int device, int stage, int microbatch, double& ready) {
  const StageInfo& info = work_.stages[stage];
  if (info.first) return true;
  if (info.previous_local) return wait(device, key(stage - 1, microbatch, detail::kForwardDone), ready);
  if (!wait(device, key(stage, microbatch, detail::kForwardArrived), ready)) return false;
  wait_rendezvous(message_index(stage, microbatch, false), info.forward_rendezvous, ready);
  return true;
}

bool Simulation::wait_backward_input(int device, int stage, int microbatch, double& ready) {
  const StageInfo& info = work_.stages[stage];
  const uint8_t facts = work_.facts[fact_index(stage, microbatch)];
  if (!info.last) {
    const int64_t gradient = info.next_local ? key(stage + 1, microbatch, detail::kInputGradDone)
                                             : key(stage, microbatch, detail::kGradArrived);
    if (!wait(device, gradient, ready)) return false;
    if (!info.next_local) wait_rendezvous(message_index(stage, microbatch, true), info.grad_rendezvous, ready);
  }
  if (!wait(device, key(stage, microbatch, detail::kForwardDone), ready)) return false;
  if ((facts & kRecomputed) && !wait(device, key(stage, microbatch, detail::kRecomputeDone), ready)) return false;
  if ((facts & kOffloaded) && !wait(device, key(stage, microbatch, detail::kReloadDone), ready)) return false;
  return true;
}

// Takes up one action: false (device parked) when an event it needs is not known yet. Nothing
// changes before every wait has passed, so a parked action is simply taken up again.
bool Simulation::step(int device, int position, const Action& a, double& clock, double& busy) {
  double ready = clock;
  if (has_custom_waits_)
    for (int64_t event : work_.custom_waits.of(work_.device_offset[device] + position))
      if (!wait(device, event, ready)) return false;

  const int s = a.stage;
  const int m = a.microbatch;
  const int column_stage_wide = layout_.stage_wide_column();
  // Runs a computation from `ready`; `workspace` bytes are held while it runs.
  auto run_compute = [&](double duration, double workspace = 0) {
    const double end = ready + duration;
    if (workspace > 0) {
      work_.compute_memory[device].push_back({ready, workspace});
      work_.compute_memory[device].push_back({end, -workspace});
    }
    record(device, position, ready, end);
    busy += duration;
    clock = end;
    return end;
  };

  switch (a.kind) {
    case ActionKind::F: {
      if (!wait_forward_input(device, s, m, ready)) return false;
      change_activation(device, ready, s, m, forward_allocation(s, m));
      produce(key(s, m, detail::kForwardDone), run_compute(work_.stages[s].forward, work_.stages[s].workspace));
      return true;
    }
    case ActionKind::B:
    case ActionKind::I: {
      if (!wait_backward_input(device, s, m, ready)) return false;
      const StageInfo& info = work_.stages[s];
      const double end = run_compute(a.kind == ActionKind::B ? info.backward : info.backward_input, info.workspace);
      change_activation(device, end, s, m, -backward_release(a.kind, s, m));
      produce(key(s, m, detail::kInputGradDone), end);
      if (a.kind == ActionKind::B) produce(key(s, m, detail::kWeightGradDone), end);
      return true;
    }
    case ActionKind::W: {
      if (!wait(device, key(s, m, detail::kInputGradDone), ready)) return false;
      const StageInfo& info = work_.stages[s];
      const double end = run_compute(info.backward_weight, info.workspace);
      const bool recomputed = work_.facts[fact_index(s, m)] & kRecomputed;
      const double checkpoint = recomputed && info.checkpoint_until_weight ? info.checkpoint : 0.0;
      change_activation(device, end, s, m, -(info.activation - info.freed_by_input + checkpoint));
      produce(key(s, m, detail::kWeightGradDone), end);
      return true;
    }
    case ActionKind::R: {
      if (!wait(device, key(s, m, detail::kForwardDone), ready)) return false;
      if ((work_.facts[fact_index(s, m)] & kOffloaded) && !wait(device, key(s, m, detail::kReloadDone), ready))
        return false;
      change_activation(device, ready, s, m, work_.stages[s].rebuilt);
      produce(key(s, m, detail::kRecomputeDone), run_compute(work_.stages[s].recompute, work_.stages[s].workspace));
      return true;
    }
    case ActionKind::Opt:
      produce(key(s, column_stage_wide, detail::kOptimizerDone), run_compute(work_.stages[s].optimizer));
      return true;
    case ActionKind::Overlap: {
      const int s2 = a.stage2;
      const int m2 = a.microbatch2;
      if (!wait_forward_input(device, s, m, ready)) return false;
      if (!wait_backward_input(device, s2, m2, ready)) return false;
      const StageInfo& backward = work_.stages[s2];
      const double backward_time = a.sub_kind == ActionKind::I ? backward.backward_input : backward.backward;
      change_activation(device, ready, s, m, forward_allocation(s, m));
      const double end = run_compute(costs_.overlap_ratio * (work_.stages[s].forward + backward_time),
                                     work_.stages[s].workspace + backward.workspace);
      change_activation(device, end, s2, m2, -backward_release(a.sub_kind, s2, m2));
      produce(key(s, m, detail::kForwardDone), end);
      produce(key(s2, m2, detail::kInputGradDone), end);
      if (a.sub_kind == ActionKind::B) produce(key(s2, m2, detail::kWeightGradDone), end);
      return true;
    }
    case ActionKind::SendF: {
      if (!wait(device, key(s, m, detail::kForwardDone), ready)) return false;
      const StageInfo& info = work_.stages[s];
      // The data leaves once the sender's host has handed it over.
      const double posted = occupy_host(device, position, ready, info.forward_send_cpu, clock);
      const Interval sent =
          transfer(device, position, device, work_.stages[s + 1].device, posted, info.forward_occupancy,
                   info.forward_latency, info.forward_send_bytes, work_.link_free[info.forward_link]);
      if (rendezvous_) work_.handed_over[message_index(s + 1, m, false)] = posted;
      produce(key(s + 1, m, detail::kForwardArrived), sent.end);
      result_.comm_bytes += info.forward_send_bytes;
      ++result_.comm_transfers;
      return true;
    }
    case ActionKind::SendB: {
      if (!wait(device, key(s, m, detail::kInputGradDone), ready)) return false;
      const StageInfo& info = work_.stages[s];
      const double posted = occupy_host(device, position, ready, info.backward_send_cpu, clock);
      const Interval sent =
          transfer(device, position, device, work_.stages[s - 1].device, posted, info.backward_occupancy,
                   info.backward_latency, info.backward_send_bytes, work_.link_free[info.backward_link]);
      if (rendezvous_) work_.handed_over[message_index(s - 1, m, true)] = posted;
      produce(key(s - 1, m, detail::kGradArrived), sent.end);
      result_.comm_bytes += info.backward_send_bytes;
      ++result_.comm_transfers;
      return true;
    }
    case ActionKind::RecvF:  // checked before simulating; its consumer waits for the transfer
      if (rendezvous_) work_.receive_posted[message_index(s, m, false)] = ready;
      occupy_host(device, position, ready, work_.stages[s].forward_receive_cpu, clock);
      return true;
    case ActionKind::RecvB:
      if (rendezvous_) work_.receive_posted[message_index(s, m, true)] = ready;
      occupy_host(device, position, ready, work_.stages[s].backward_receive_cpu, clock);
      return true;
    case ActionKind::Offload: {
      if (!wait(device, key(s, m, detail::kForwardDone), ready)) return false;
      // What the stage's operators decided Offload saved, at most what (s,m) holds now.
      const double bytes = std::min(work_.held[fact_index(s, m)], work_.stages[s].offload);
      work_.offloaded[fact_index(s, m)] = bytes;
      const Interval moved = transfer(device, position, device, -1, ready, costs_.host_link.transfer_time(bytes), 0,
                                      bytes, work_.host_out_free[device]);
      work_.async_memory[device].push_back({moved.end, -bytes});
      produce(key(s, m, detail::kOffloadDone), moved.end);
      record(device, position, clock, clock);
      return true;
    }
    case ActionKind::Reload: {
      if (!wait(device, key(s, m, detail::kOffloadDone), ready)) return false;
      const double bytes = work_.offloaded[fact_index(s, m)];
      const Interval moved = transfer(device, position, -1, device, ready, costs_.host_link.transfer_time(bytes), 0,
                                      bytes, work_.host_in_free[device]);
      work_.async_memory[device].push_back({moved.start, bytes});
      produce(key(s, m, detail::kReloadDone), moved.end);
      record(device, position, clock, clock);
      return true;
    }
    case ActionKind::Custom: {
      const CustomOpKind& op = schedule_.custom_ops[a.custom];
      const int64_t event = key(s, op.per_microbatch ? m : column_stage_wide, detail::kNumFixedSlots + a.custom);
      if (op.communicates) {
        const Interval ran =
            transfer(device, position, device, device, ready, op.duration, 0, 0, work_.side_free[device]);
        if (op.memory != 0) work_.async_memory[device].push_back({op.memory > 0 ? ran.start : ran.end, op.memory});
        produce(event, ran.end);
        record(device, position, clock, clock);
      } else {
        const double start = ready;
        const double end = run_compute(op.duration);
        if (op.memory != 0) work_.compute_memory[device].push_back({op.memory > 0 ? start : end, op.memory});
        produce(event, end);
      }
      return true;
    }
  }
  return true;
}

std::string Simulation::describe_event(int64_t event) const {
  const int stage = layout_.stage_of(event);
  const int column = layout_.column_of(event);
  const int microbatch = column < schedule_.num_microbatches ? column : -1;
  const int slot = layout_.slot_of(event);
  const bool split = microbatch >= 0 && (work_.facts[fact_index(stage, microbatch)] & kSplit);
  Action producer;
  switch (slot) {
    case detail::kForwardDone: producer = Action::make(ActionKind::F, stage, microbatch); break;
    case detail::kInputGradDone:
      producer = Action::make(split ? ActionKind::I : ActionKind::B, stage, microbatch);
      break;
    case detail::kWeightGradDone:
      producer = Action::make(split ? ActionKind::W : ActionKind::B, stage, microbatch);
      break;
    case detail::kRecomputeDone: producer = Action::make(ActionKind::R, stage, microbatch); break;
    case detail::kForwardArrived: producer = Action::make(ActionKind::SendF, stage - 1, microbatch); break;
    case detail::kGradArrived: producer = Action::make(ActionKind::SendB, stage + 1, microbatch); break;
    case detail::kOffloadDone: producer = Action::make(ActionKind::Offload, stage, microbatch); break;
    case detail::kReloadDone: producer = Action::make(ActionKind::Reload, stage, microbatch); break;
    case detail::kOptimizerDone: producer = Action::make(ActionKind::Opt, stage); break;
    default:
      producer = Action::custom_op(static_cast<uint16_t>(slot - detail::kNumFixedSlots), stage, microbatch);
      break;
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
    detail::summarize_memory(work_.compute_memory[d], work_.async_memory[d], options_.record_memory, report);
    report.fits = report.peak_memory <= report.capacity;
    result_.fits = result_.fits && report.fits;
    idle += report.idle;
  }
  result_.bubble_ratio = makespan > 0 ? idle / (devices * makespan) : 0.0;
  result_.lower_bound = std::max(busiest, detail::critical_path(schedule_, costs_, work_.split_stage));
  result_.efficiency = makespan > 0 ? result_.lower_bound / makespan : 1.0;
}

}  // namespace

SimOutcome try_simulate(const Schedule& lowered, const CostTable& costs, const SimOptions& options) {
  SimOutcome outcome;
  Simulation simulation(lowered, costs, options, workspace(), outcome.result);
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
