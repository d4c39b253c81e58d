// Internal to the validator: a flat table that locates every action by (slot, stage, micro-batch),
// so the rules and the deadlock check find an action in O(1) without maps, and the entry point of
// the deadlock check (src/validate/deadlock.cpp).
//
// A slot is an action kind (F, B, I, ...) or, from kNumActionKinds on, a declared custom kind. An
// Overlap action is recorded twice, once per half, both at the Overlap's position. Each stage row
// has num_microbatches columns, one for stage-wide actions (micro-batch -1: OPT, stage-wide custom
// kinds) and one standing for "every action of this slot at this stage", used by dependencies
// that cover all micro-batches. Only correctly placed actions are recorded, so every action of a
// stage sits on that stage's device and a position alone locates it.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "flexpipe/ir/action.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe::validator {

// The first and last recorded positions of one slot at one stage, with their micro-batches.
struct StageExtent {
  int32_t count = 0;
  int32_t first = -1;
  int32_t first_microbatch = -1;
  int32_t last = -1;
  int32_t last_microbatch = -1;
};

// The parts of an action that count on their own: both halves of an Overlap, else the action.
struct Halves {
  std::array<Action, 2> part;
  int count = 1;
};

inline Halves halves_of(const Action& action) {
  if (action.kind == ActionKind::Overlap) return {{action.forward_half(), action.backward_half()}, 2};
  return {{action, Action{}}, 1};
}

inline int slot_of(const Action& half) {
  return half.kind == ActionKind::Custom ? kNumActionKinds + half.custom : static_cast<int>(half.kind);
}

constexpr int slot_of(ActionKind kind) { return static_cast<int>(kind); }

class ActionTable {
 public:
  ActionTable(int stages, int microbatches, int custom_kinds)
      : stages_(stages),
        microbatches_(microbatches),
        row_(microbatches + 2),
        slots_(kNumActionKinds + custom_kinds),
        positions_(static_cast<size_t>(slots_) * stages_ * row_, -1),
        extents_(static_cast<size_t>(slots_) * stages_) {}

  int64_t size() const { return static_cast<int64_t>(positions_.size()); }
  int64_t key(int slot, int stage, int microbatch) const {
    return (static_cast<int64_t>(slot) * stages_ + stage) * row_ + (microbatch >= 0 ? microbatch : microbatches_);
  }
  int64_t all_key(int slot, int stage) const {
    return (static_cast<int64_t>(slot) * stages_ + stage) * row_ + row_ - 1;
  }
  bool is_all_key(int64_t key) const { return key % row_ == row_ - 1; }
  // (slot, stage) pairs are numbered 0..slot_stage_count()-1 in key order.
  int64_t slot_stage_count() const { return static_cast<int64_t>(extents_.size()); }
  int64_t slot_stage_of_key(int64_t key) const { return key / row_; }
  int64_t row_start(int64_t key) const { return key - key % row_; }
  int slot_of_key(int64_t key) const { return static_cast<int>(key / row_ / stages_); }
  int stage_of_key(int64_t key) const { return static_cast<int>(key / row_ % stages_); }
  int microbatch_of_key(int64_t key) const {
    int column = static_cast<int>(key % row_);
    return column < microbatches_ ? column : -1;
  }

  int position(int64_t key) const { return positions_[key]; }
  int position(int slot, int stage, int microbatch) const { return positions_[key(slot, stage, microbatch)]; }
  const StageExtent& extent(int slot, int stage) const { return extents_[static_cast<size_t>(slot) * stages_ + stage]; }

  // Records one action (or Overlap half) at `position`. Returns the position already recorded for
  // the same slot, stage and micro-batch, or -1 when this is the first.
  int record(int slot, int stage, int microbatch, int position) {
    int32_t& entry = positions_[key(slot, stage, microbatch)];
    if (entry >= 0) return entry;
    entry = position;
    StageExtent& e = extents_[static_cast<size_t>(slot) * stages_ + stage];
    ++e.count;
    if (e.first < 0 || position < e.first) e.first = position, e.first_microbatch = microbatch;
    if (position > e.last) e.last = position, e.last_microbatch = microbatch;
    return -1;
  }

  // The backward that produces (stage, micro-batch)'s input gradient: B, else I (absent: -1 position).
  int64_t backward_key(int stage, int microbatch) const {
    int64_t full = key(slot_of(ActionKind::B), stage, microbatch);
    return positions_[full] >= 0 ? full : key(slot_of(ActionKind::I), stage, microbatch);
  }

  // The action a slot stands for, for naming it.
  static Action action_for(int slot, int stage, int microbatch) {
    if (slot >= kNumActionKinds)
      return Action::custom_op(static_cast<uint16_t>(slot - kNumActionKinds), stage, microbatch);
    return Action::make(static_cast<ActionKind>(slot), stage, microbatch);
  }

 private:
  int stages_;
  int microbatches_;
  int row_;
  int slots_;
  std::vector<int32_t> positions_;
  std::vector<StageExtent> extents_;
};

// Executes the schedule without time under the runtime's semantics (see docs/validator.md) and
// returns one diagnostic describing the cycle of waiting devices, or nothing when every device
// finishes. Assumes rules 1-5 hold: every action an action waits for exists.
std::optional<Diagnostic> find_deadlock(const Schedule& schedule, const ActionTable& table);

}  // namespace flexpipe::validator
