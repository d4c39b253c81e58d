// Internal to the simulator (docs/simulator.md): the flat table of event times it keys by
// (stage, column, slot), the structural checks that keep every index in range, the waits that
// declared custom dependencies add, the memory curve, and the critical path lower_bound shares.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/action.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/sim/simulator.h"

namespace flexpipe::sim {

// The events the simulator learns the time of, once each, per (stage, micro-batch). A SEND's end
// is recorded as the arrival at its peer stage, so a dependency on SEND_F(s, m) is one on
// kForwardArrived of (s + 1, m).
enum Slot : int {
  kForwardDone,     // F, or an Overlap's forward half, ended
  kInputGradDone,   // B, I, or an Overlap's backward half, ended: the input gradient exists
  kWeightGradDone,  // W, or B (or an Overlap's B half), ended
  kRecomputeDone,   // R ended
  kForwardArrived,  // the stage's input arrived on its device (the previous stage's SEND_F ended)
  kGradArrived,     // the stage's output gradient arrived (the next stage's SEND_B ended)
  kOffloadDone,
  kReloadDone,
  kOptimizerDone,
  kNumFixedSlots,  // one slot per declared custom kind follows
};

// Keys of the event table. Each stage row has a column per micro-batch, one for stage-wide
// actions (OPT, custom kinds that are not per micro-batch) and one standing for "every
// micro-batch" in custom dependencies; slots vary fastest so one (stage, micro-batch)'s events
// share a cache line.
struct KeyLayout {
  int stages = 0;
  int microbatches = 0;
  int slots = 0;

  int stage_wide_column() const { return microbatches; }
  int all_column() const { return microbatches + 1; }
  int64_t size() const { return static_cast<int64_t>(stages) * (microbatches + 2) * slots; }
  int64_t key(int stage, int column, int slot) const {
    return (static_cast<int64_t>(stage) * (microbatches + 2) + column) * slots + slot;
  }
  int slot_of(int64_t key) const { return static_cast<int>(key % slots); }
  int column_of(int64_t key) const { return static_cast<int>(key / slots % (microbatches + 2)); }
  int stage_of(int64_t key) const { return static_cast<int>(key / slots / (microbatches + 2)); }
};

// Where "an action of `kind` at `stage` ended" is recorded: {stage, slot}, or slot -1 for kinds
// no event stands for (OVERLAP_F_B as a whole, RECV actions as targets).
struct EventRef {
  int stage = -1;
  int slot = -1;
};
EventRef event_of(const Schedule& schedule, ActionKind kind, int stage, int custom);

// Why the schedule's shape (devices, placement, pipelines) is not usable; empty when it is.
std::string schedule_shape_problem(const Schedule& schedule);
// "device D #I CELL: ..." unless every index the action holds is in range and its stages sit on
// `device`, and a communication action has a peer on another device; empty when all hold.
std::string action_problem(const Schedule& schedule, int device, int position, const Action& action);
// The common case of that check without building a message: true only when action_problem would be
// empty for a compute, memory or point-to-point action; false (ask action_problem) otherwise.
inline bool action_plainly_fine(const Schedule& schedule, int device, const Action& action) {
  const int stages = schedule.num_stages();
  auto own = [&] {
    return action.stage >= 0 && action.stage < stages && schedule.stage_device[action.stage] == device &&
           action.microbatch >= 0 && action.microbatch < schedule.num_microbatches;
  };
  auto peer = [&](int other) { return other >= 0 && schedule.stage_device[other] != device; };
  switch (action.kind) {
    case ActionKind::F:
    case ActionKind::B:
    case ActionKind::I:
    case ActionKind::W:
    case ActionKind::R:
    case ActionKind::Offload:
    case ActionKind::Reload: return own();
    case ActionKind::SendF:
    case ActionKind::RecvB: return own() && peer(schedule.next_stage(action.stage));
    case ActionKind::SendB:
    case ActionKind::RecvF: return own() && peer(schedule.prev_stage(action.stage));
    default: return false;
  }
}

// The extra waits that declared custom dependencies put on actions, in CSR form over the flat
// action index (device_offset[d] + position). Empty when the schedule declares no custom kinds.
struct CustomWaits {
  std::vector<int64_t> first;  // size actions + 1
  std::vector<int64_t> keys;
  bool empty() const { return keys.empty(); }
  std::span<const int64_t> of(int64_t flat_index) const {
    return {keys.data() + first[flat_index], keys.data() + first[flat_index + 1]};
  }
};
// Returns why the waits cannot be built (a dependency the simulator cannot order); empty when built.
std::string build_custom_waits(const Schedule& schedule, const KeyLayout& layout,
                               std::span<const int64_t> device_offset, CustomWaits& waits);

struct MemoryEvent {
  double time = 0;
  double delta = 0;
};

// Fills report.peak_memory, peak_time and (when record_curve) memory from the static bytes and
// the activation events: `ordered` is sorted by time already, `unordered` is sorted here.
void summarize_memory(std::span<const MemoryEvent> ordered, std::vector<MemoryEvent>& unordered, bool record_curve,
                      DeviceReport& report);

// Duration of an action on its device's compute stream (0 for actions off it).
double compute_duration(const Schedule& schedule, const CostTable& costs, const Action& action);
// One micro-batch's critical path through each pipeline that holds micro-batches, the longest of
// them; split_stage[s] says whether stage s splits its backward into I and W.
double critical_path(const Schedule& schedule, const CostTable& costs, std::span<const uint8_t> split_stage);

}  // namespace flexpipe::sim
