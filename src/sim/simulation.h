// The simulation's state and its event loop's primitives, shared by the simulator's two sources:
// simulation_setup.cpp (the checks and tables before the loop) and simulator.cpp (the loop, one
// handler per kind of action, the report).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/sim/simulator.h"
#include "simulator_detail.h"

namespace flexpipe::sim {

// Facts about one (stage, micro-batch) that the pass before simulating finds in the schedule.
enum Fact : uint8_t {
  kRecomputed = 1,            // has an R action: F keeps a checkpoint, R rebuilds the activations
  kOffloaded = 2,             // has an OFFLOAD: the backward (or R) waits for the RELOAD
  kSplit = 4,                 // its backward is I then W
  kForwardReceivePosted = 8,  // a RECV_F has been seen (the pass walks each list in order)
  kGradReceivePosted = 16,
};

// The two directions a stage sends in: its output to the next stage (SEND_F), its input gradient to
// the previous one (SEND_B).
enum Direction : int { kActivation = 0, kGradient = 1 };

// What one SEND of a stage costs: how long the message holds its link, how much later it arrives,
// and the host time it takes on the sender (Link::send_cpu).
struct OutgoingMessage {
  int32_t link = -1;
  double occupancy = 0, bytes = 0, latency = 0, send_cpu = 0;
};

// What the inner loop reads about a global stage, in one place.
struct StageInfo {
  int32_t device = 0;
  bool first = false;
  bool last = false;
  bool previous_local = false;  // the previous stage is on the same device: no transfer
  bool next_local = false;
  bool checkpoint_until_weight = false;
  // What computations read first, together: a stage's first cache line holds its compute costs.
  double forward = 0, backward = 0, backward_input = 0, backward_weight = 0, recompute = 0;
  double workspace = 0;  // held while any of the stage's computations runs
  double activation = 0, freed_by_input = 0, checkpoint = 0;
  double rebuilt = 0;  // what R holds until the backward ends: the largest segment, or everything when split
  double optimizer = 0;
  double offload = kInfinity;  // the most one OFFLOAD moves
  // This stage's SEND_F (sends[kActivation]) and SEND_B (sends[kGradient]).
  OutgoingMessage sends[2];
  // Where the links this stage receives its input and its output gradient over have a rendezvous
  // (Link::rendezvous): from the RECV's start to the message's arrival, its bytes over the bandwidth
  // included; 0 without one.
  double forward_rendezvous = 0, grad_rendezvous = 0;
  // Host time of this stage's RECV_F and RECV_B on its device (Link::receive_cpu).
  double forward_receive_cpu = 0, backward_receive_cpu = 0;
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
  CustomWaits custom_waits;
};

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

  // One device's place in its list while advance() runs it: kept in one struct the handlers share
  // so that it stays in registers across an inlined step.
  struct Cursor {
    int device = 0;
    int position = 0;
    double clock = 0;  // when the device's compute stream (and its host) is free
    double busy = 0;   // compute time so far
  };

  bool prepare();
  bool scan_actions();
  void prepare_stages();
  void advance(int device);
  bool step(Cursor& at, const Action& action);
  // One handler per kind of action: false (device parked) when an event it needs is not known yet.
  // Nothing changes before every wait has passed, so a parked action is simply taken up again.
  bool forward(Cursor& at, const Action& a, double ready);
  bool backward(Cursor& at, const Action& a, double ready);
  bool weight_gradient(Cursor& at, const Action& a, double ready);
  bool recompute(Cursor& at, const Action& a, double ready);
  bool overlap(Cursor& at, const Action& a, double ready);
  bool send(Cursor& at, const Action& a, double ready, Direction direction);
  void receive(Cursor& at, const Action& a, double ready);
  bool offload(Cursor& at, const Action& a, double ready);
  bool reload(Cursor& at, const Action& a, double ready);
  void custom(Cursor& at, const Action& a, double ready);
  bool deadlocked();
  void finish();

  // Records why the schedule cannot run; returns false for the caller to return.
  bool fail(SimStatus status, std::string message) {
    status_ = status;
    message_ = std::move(message);
    return false;
  }

  // wait, produce and compute are forced inline: g++ kept them out of line, and the handlers' calls
  // to them cost the event loop a quarter of its time (docs/performance.md, issue 49).
  // Parks the device on `key` unless the event is known; else moves `ready` to it.
  [[gnu::always_inline]] bool wait(int device, int64_t event, double& ready) {
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

  [[gnu::always_inline]] void produce(int64_t event, double time) {
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
  bool forward_received(int device, int position, const Action& consumer, int stage, int microbatch);
  bool backward_received(int device, int position, const Action& consumer, int stage, int microbatch);
  bool receive_missing(int device, int position, const Action& consumer, const Action& producer,
                       std::string_view receive);
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
  // Runs a computation on the device's compute stream from `ready`; `workspace` bytes are held while
  // it runs. Returns its end.
  [[gnu::always_inline]] double compute(Cursor& at, double ready, double duration, double workspace = 0) {
    const double end = ready + duration;
    if (workspace > 0) {
      work_.compute_memory[at.device].push_back({ready, workspace});
      work_.compute_memory[at.device].push_back({end, -workspace});
    }
    record(at.device, at.position, ready, end);
    at.busy += duration;
    at.clock = end;
    return end;
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
  int64_t transfers_ = 0;  // actions that move data: the recorded transfer list's size
  SimStatus status_ = SimStatus::Ok;
  std::string message_;
};

}  // namespace flexpipe::sim
