// A schedule as it really ran: per-device action times recorded by the runtime, turned into the
// simulator's result type so that the same views (grid, SVG, Perfetto trace, report) draw it, and
// into a cost table of measured per-stage action times, so that the simulator's prediction for the
// same costs can be printed next to the measurement.
#pragma once
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

// One step as it ran: per device of one pipeline, its executed actions.
using MeasuredStep = std::vector<std::vector<MeasuredAction>>;

// One pipeline message between devices, seen from both ends, in each end's own clock.
struct MeasuredMessage {
  bool gradient = false;  // SEND_B's, else SEND_F's
  int sender = 0;
  int receiver = 0;
  double sent = 0;         // its SEND began
  double handed_over = 0;  // its SEND ended
  double posted = 0;       // its RECV began
  double arrived = 0;      // its consumer stopped waiting
  double waited = 0;       // how long the consumer waited
};

// The step's messages whose SEND, RECV and consumer were all recorded, the consumer being an F, B
// or I (an OVERLAP waits for two messages at once, and which one held it is not known).
std::vector<MeasuredMessage> measured_messages(const Schedule& lowered, const MeasuredStep& step);

// Per device, what to add to its times to put them on device 0's clock. Each rank's clock starts as
// it leaves the step's barrier, and a rank can leave it milliseconds after another (its message
// out of the barrier waits for a core). No message arrives before it was sent: per pair of devices
// that send each other messages, the least SEND-to-consumer delay each way bounds the offset, and
// taking the shortest delay to be the same both ways puts it halfway (as NTP does).
std::vector<double> clock_offsets(const Schedule& lowered, const MeasuredStep& step);

// What the simulator needs to predict those steps. Per model chunk, the mean measured time (wait
// excluded) of each compute kind over every step given; kinds never run keep the derived defaults
// (B = I + W, R = F). Means, not medians: a step adds up many actions, and a sum's typical value is
// the sum of the means, which a skewed action time (the scheduler's preemptions) puts above the sum
// of the medians. OVERLAP actions give the overlap ratio: their time over their halves' when alone.
// The link: its host times (Link::send_cpu, receive_cpu) are the mean times of the SEND and RECV
// actions. Messages (only those whose consumer waited tell when their data came), on one clock
// (clock_offsets), fall in two kinds: one handed over after its RECV began went eagerly, and the
// mean time from the end of its SEND to its consumer having it is the latency; one handed over
// before waited for the receive (Gloo's rendezvous), and the mean time from the RECV's start to its
// consumer having it is Link::rendezvous. Means, as for the actions: the waits add up in a step.
// Bandwidth stays unlimited: the latencies are observed at the sizes the model sends.
CostTable measured_costs(const Schedule& lowered, const std::vector<MeasuredStep>& steps);

// Where one device's step went, in the step's time unit; the four parts add up to the step.
struct TimeBreakdown {
  double compute = 0;   // computations (F, B, I, W, R, OPT, non-communicating custom), waits excluded
  double transfer = 0;  // host time of SEND, RECV, OFFLOAD, RELOAD and communicating custom actions
  double waiting = 0;   // blocked on a peer, and idle after the device's last action until the step ends
  double overhead = 0;  // between actions: the host's bookkeeping, which the simulator does not see
};

// Per device of a measured step.
std::vector<TimeBreakdown> measured_breakdown(const Schedule& lowered, const MeasuredStep& step);
// Per device of a simulated step (its timeline recorded): waiting is all its idle time, overhead 0.
std::vector<TimeBreakdown> simulated_breakdown(const Schedule& lowered, const SimResult& simulated);

// The schedule with each custom operation kind's duration set to its mean measured time over the
// steps (the simulator reads custom durations from the schedule, not from the cost table).
Schedule with_measured_custom_durations(Schedule lowered, const std::vector<MeasuredStep>& steps);

}  // namespace flexpipe
