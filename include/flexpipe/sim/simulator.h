// Event-driven, deterministic simulation of a lowered schedule with real costs and memory.
// Each device runs its list in order on one compute stream; transfers run on their own links
// (one FIFO per directed device pair, one per device to and from the host) and overlap compute.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"

namespace flexpipe {

struct Interval {
  double start = 0;
  double end = 0;
};

struct Transfer {
  int src = 0;       // device (-1: host)
  int dst = 0;       // device (-1: host)
  int device = 0;    // device whose list holds the posting action
  int position = 0;  // that action's index in the list
  double bytes = 0;
  Interval time;
};

struct MemorySample {
  double time = 0;
  double bytes = 0;  // total on the device from this time on
};

struct DeviceReport {
  double busy = 0;           // time the compute stream works
  double idle = 0;           // makespan - busy
  double static_memory = 0;  // parameters, gradients, optimizer state
  double peak_memory = 0;    // static + the highest activation level
  double peak_time = 0;      // first time the peak is reached
  double capacity = kInfinity;
  bool fits = true;
  std::vector<MemorySample> memory;  // step function, sorted by time
};

struct SimResult {
  double makespan = 0;
  double bubble_ratio = 0;  // sum of idle / (devices * makespan)
  double lower_bound = 0;   // max(busiest device's work, one micro-batch's critical path)
  double efficiency = 0;    // lower_bound / makespan
  double comm_bytes = 0;
  int64_t comm_transfers = 0;
  bool fits = true;  // every device within its memory capacity
  std::vector<DeviceReport> devices;
  std::vector<std::vector<Interval>> timeline;  // per device, per action (same indices as the schedule)
  std::vector<Transfer> transfers;
};

struct SimOptions {
  bool record_timeline = true;  // off for the search: only the report
  bool record_memory = true;
};

// Throws Error (naming device, position and action) when the schedule cannot run: malformed, not
// lowered where it must be, or deadlocked (try_simulate's failing statuses, with the same messages).
SimResult simulate(const Schedule& lowered, const CostTable& costs, const SimOptions& options = {});

// How a simulation ended: whether the schedule ran to the end, and within memory.
enum class SimStatus : uint8_t {
  Ok,          // ran to the end, every device within its capacity
  OverMemory,  // ran to the end, some device above its capacity (simulate returns it with fits false)
  Malformed,   // an index out of range, a cost table of another shape, an undeclared custom kind or a
               // custom dependency the simulator cannot order
  NotLowered,  // an action whose input comes from another device has no RECV before it
  Deadlocked,  // every unfinished device waits for an action that cannot run before it
};

struct SimOutcome {
  SimStatus status = SimStatus::Ok;
  std::string message;  // when the schedule did not run: the message simulate throws; else empty
  SimResult result;     // when it ran (Ok or OverMemory): simulate's result; else empty
  bool ran() const { return status == SimStatus::Ok || status == SimStatus::OverMemory; }
};

// simulate for callers that try many schedules and reject those that cannot run (the search's
// reorderings may deadlock): a status instead of an exception, so a rejection costs no unwinding.
SimOutcome try_simulate(const Schedule& lowered, const CostTable& costs, const SimOptions& options = {});

// The larger of the busiest device's work and the critical path of one micro-batch.
double lower_bound(const Schedule& schedule, const CostTable& costs);

}  // namespace flexpipe
