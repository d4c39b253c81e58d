// Rule 6 of the validator: deadlock freedom. Runs every device's list without time: a device stops
// right before an action whose cross-device input is not there yet and resumes when it arrives;
// sends never block. Each action runs once and a blocked device is woken only by the completion it
// waits for, so the run is linear in the number of actions.
#include <fmt/format.h>

#include "validator_detail.h"

namespace flexpipe::validator {
namespace {

constexpr int kF = slot_of(ActionKind::F);
constexpr int kSendF = slot_of(ActionKind::SendF);
constexpr int kSendB = slot_of(ActionKind::SendB);

// A custom kind's `before` dependency seen from the action it must precede.
struct Precondition {
  int custom_slot;
  CustomDependency dependency;
};

class Execution {
 public:
  Execution(const Schedule& schedule, const ActionTable& table)
      : s_(schedule),
        table_(table),
        lowered_(schedule.has_communication()),
        done_(table.size(), 0),
        done_per_stage_(table.slot_stage_count(), 0),
        first_waiter_(table.size(), -1),
        next_waiter_(schedule.num_devices, -1),
        waits_for_(schedule.num_devices, -1),
        cursor_(schedule.num_devices, 0) {
    for (size_t c = 0; c < s_.custom_ops.size(); ++c)
      for (const CustomDependency& dep : s_.custom_ops[c].before)
        preconditions_[static_cast<int>(dep.kind)].push_back({kNumActionKinds + static_cast<int>(c), dep});
  }

  std::optional<Diagnostic> run() {
    for (int d = s_.num_devices - 1; d >= 0; --d) worklist_.push_back(d);
    while (!worklist_.empty()) {
      int device = worklist_.back();
      worklist_.pop_back();
      advance(device);
    }
    for (int d = 0; d < s_.num_devices; ++d)
      if (cursor_[d] < static_cast<int>(s_.device_actions[d].size())) return describe_cycle(d);
    return std::nullopt;
  }

 private:
  void advance(int device) {
    const std::vector<Action>& list = s_.device_actions[device];
    while (cursor_[device] < static_cast<int>(list.size())) {
      const Action& action = list[cursor_[device]];
      int64_t missing = first_missing_input(action);
      if (missing >= 0) {
        waits_for_[device] = missing;
        next_waiter_[device] = first_waiter_[missing];
        first_waiter_[missing] = device;
        return;
      }
      complete(action);
      ++cursor_[device];
    }
  }

  int64_t first_missing_input(const Action& action) const {
    Halves halves = halves_of(action);
    for (int h = 0; h < halves.count; ++h)
      if (int64_t missing = first_missing_input_of_half(halves.part[h]); missing >= 0) return missing;
    return -1;
  }

  // Inputs from the same device are already done: rules 3-5 checked the list order.
  int64_t first_missing_input_of_half(const Action& half) const {
    int stage = half.stage, microbatch = half.microbatch;
    int device = s_.stage_device[stage];
    if (half.kind == ActionKind::F) {
      int prev = s_.prev_stage(stage);
      if (prev >= 0 && s_.stage_device[prev] != device) {
        int64_t input = table_.key(lowered_ ? kSendF : kF, prev, microbatch);
        if (!done_[input]) return input;
      }
    } else if (is_backward(half.kind)) {
      int next = s_.next_stage(stage);
      if (next >= 0 && s_.stage_device[next] != device) {
        int64_t input = lowered_ ? table_.key(kSendB, next, microbatch) : table_.backward_key(next, microbatch);
        if (!done_[input]) return input;
      }
    } else if (half.kind == ActionKind::Custom) {
      for (const CustomDependency& dep : s_.custom_ops[half.custom].after) {
        int64_t input = existing_key(slot_of(dep.kind), half, dep.stage_offset, dep.all_microbatches);
        if (input >= 0 && !done_[input]) return input;
      }
    }
    for (const Precondition& pre : preconditions_[static_cast<int>(half.kind)]) {
      int64_t input =
          existing_key(pre.custom_slot, half, -int64_t{pre.dependency.stage_offset}, pre.dependency.all_microbatches);
      if (input >= 0 && !done_[input]) return input;
    }
    return -1;
  }

  // The key of the `slot` action(s) at `half`'s stage + offset in its pipeline, or -1 when none exists.
  int64_t existing_key(int slot, const Action& half, int64_t stage_offset, bool all_microbatches) const {
    int64_t chunk = s_.chunk_of_stage(half.stage) + stage_offset;
    if (chunk < 0 || chunk >= s_.stages_per_pipeline) return -1;
    int stage = static_cast<int>(half.stage + stage_offset);
    if (all_microbatches) return table_.extent(slot, stage).count > 0 ? table_.all_key(slot, stage) : -1;
    int64_t key = table_.key(slot, stage, half.microbatch);
    return table_.position(key) >= 0 ? key : -1;
  }

  void complete(const Action& action) {
    Halves halves = halves_of(action);
    for (int h = 0; h < halves.count; ++h) {
      const Action& half = halves.part[h];
      int slot = slot_of(half);
      mark_done(table_.key(slot, half.stage, half.microbatch));
      int64_t all = table_.all_key(slot, half.stage);
      if (++done_per_stage_[table_.slot_stage_of_key(all)] == table_.extent(slot, half.stage).count) mark_done(all);
    }
  }

  void mark_done(int64_t key) {
    done_[key] = 1;
    for (int32_t device = first_waiter_[key]; device >= 0; device = next_waiter_[device]) worklist_.push_back(device);
    first_waiter_[key] = -1;
  }

  // The action a key waits for: for "every action of a stage", the first one not done yet.
  int64_t awaited_action(int64_t key) const {
    if (!table_.is_all_key(key)) return key;
    for (int64_t k = table_.row_start(key); k < key; ++k)
      if (table_.position(k) >= 0 && !done_[k]) return k;
    return key;
  }

  std::string describe_wait(int device) const {
    int position = cursor_[device];
    int64_t awaited = awaited_action(waits_for_[device]);
    int stage = table_.stage_of_key(awaited);
    Action awaited_cell =
        ActionTable::action_for(table_.slot_of_key(awaited), stage, table_.microbatch_of_key(awaited));
    return fmt::format("device {} #{} {} waits for {} (device {} #{})", device, position,
                       s_.action_name(s_.device_actions[device][position]), s_.action_name(awaited_cell),
                       s_.stage_device[stage], table_.position(awaited));
  }

  // Every action waited for exists and has not run, so its device is blocked too: following the
  // waits from any blocked device must come back to a device already seen.
  Diagnostic describe_cycle(int start) const {
    std::vector<int> chain;
    std::vector<int> seen_at(s_.num_devices, -1);
    int device = start;
    while (seen_at[device] < 0) {
      seen_at[device] = static_cast<int>(chain.size());
      chain.push_back(device);
      device = s_.stage_device[table_.stage_of_key(awaited_action(waits_for_[device]))];
    }
    std::string message = "deadlock: ";
    for (size_t i = seen_at[device]; i < chain.size(); ++i) {
      if (i > static_cast<size_t>(seen_at[device])) message += "; ";
      message += describe_wait(chain[i]);
    }
    return {-1, -1, "", message};
  }

  const Schedule& s_;
  const ActionTable& table_;
  bool lowered_;
  std::array<std::vector<Precondition>, kNumActionKinds> preconditions_;
  std::vector<uint8_t> done_;
  std::vector<int32_t> done_per_stage_;  // per (slot, stage): how many of its actions ran
  std::vector<int32_t> first_waiter_;    // per key: a device blocked on it, -1 when none
  std::vector<int32_t> next_waiter_;     // per device: the next device blocked on the same key
  std::vector<int64_t> waits_for_;       // per blocked device: the key it waits for
  std::vector<int32_t> cursor_;          // per device: index of the next action to run
  std::vector<int32_t> worklist_;
};

}  // namespace

std::optional<Diagnostic> find_deadlock(const Schedule& schedule, const ActionTable& table) {
  return Execution(schedule, table).run();
}

}  // namespace flexpipe::validator
