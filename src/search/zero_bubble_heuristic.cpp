// Zero Bubble's greedy heuristic (the authors' `manual_order`): a warm-up of forwards sized so that
// each device is busy until its first gradient arrives, then one forward and one I per micro-batch on
// every device, W's filling the waits and making room for the forwards.
#include "flexpipe/search/zero_bubble_heuristic.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

enum Pass { kForward = 0, kInput = 1, kWeight = 2 };

// The heuristic's state: per stage, the passes placed so far, when its device is next free, the
// activations it holds and the idle time it has had; per pass, stage and micro-batch, when it ends.
class ZeroBubbleGreedy {
 public:
  ZeroBubbleGreedy(const Schedule& skeleton, const CostTable& costs, ZeroBubbleVariant variant)
      : schedule_(skeleton), variant_(variant), stages_(skeleton.num_stages()), micro_(skeleton.num_microbatches) {
    if (skeleton.num_pipelines != 1 || stages_ != skeleton.num_devices)
      throw Error(
          fmt::format("zero_bubble_order: needs one stage per device on one pipeline, got {} stages on {} "
                      "devices, {} pipelines",
                      stages_, skeleton.num_devices, skeleton.num_pipelines));
    schedule_.device_actions.assign(skeleton.num_devices, {});
    for (int s = 0; s < stages_; ++s) {
      const StageCosts& c = costs.stages[skeleton.chunk_of_stage(s)];
      const int device = skeleton.stage_device[s];
      time_[s] = {c.forward, c.backward_input, c.backward_weight};
      memory_[s] = {c.activation_bytes, -c.freed_by_input, -(c.activation_bytes - c.freed_by_input)};
      limit_[s] = costs.capacity(device) - c.parameter_bytes - c.gradient_bytes - c.optimizer_bytes - c.workspace_bytes;
      if (s + 1 < stages_) {
        const int next = skeleton.stage_device[s + 1];
        to_next_[s] = costs.link_between(device, next).transfer_time(c.output_bytes);
        from_next_[s] = costs.link_between(next, device).transfer_time(c.output_bytes);
      }
    }
  }

  std::optional<Schedule> run() {
    if (!warm_up()) return std::nullopt;
    for (int mb = 1; mb < micro_; ++mb)
      if (!forwards_of_a_step() || !backwards_of_a_step(mb)) return std::nullopt;
    for (int s = 0; s < stages_; ++s) {
      // With fewer micro-batches than stages the authors' warm-up can leave a stage ahead of the one
      // before it, and that stage's last forwards are never placed: no schedule.
      if (count_[s][kForward] < micro_) return std::nullopt;
      while (count_[s][kWeight] < micro_) put(s, kWeight);
    }
    return std::move(schedule_);
  }

 private:
  // Every stage's first forward, then as many more as keep each device busy until its first gradient
  // arrives (fewer on each later stage), then the first I down the pipeline.
  bool warm_up() {
    for (int s = 0; s < stages_; ++s)
      if (!put(s, kForward)) return false;
    std::vector<int> extra(stages_, 0);
    double gradient = 0;  // when the first I ends on the stage after
    for (int s = stages_ - 1; s >= 0; --s) {
      if (s == stages_ - 1) {
        gradient = end_of(kForward, s, 0) + time_[s][kInput];
        continue;
      }
      double held = held_[s], busy_until = free_at_[s];
      const double arrives = gradient + from_next_[s];
      while (count_[s][kForward] + extra[s] < micro_ && held + memory_[s][kForward] <= limit_[s]) {
        if (variant_.bubble_before_first_backward ? busy_until + time_[s][kForward] > arrives : busy_until >= arrives)
          break;
        held += memory_[s][kForward];
        busy_until += time_[s][kForward];
        ++extra[s];
      }
      gradient = std::max(busy_until, arrives) + time_[s][kInput];
    }
    for (int s = 1; s < stages_; ++s)
      while (extra[s] > 0 && extra[s] >= extra[s - 1] && count_[s][kForward] + extra[s] < micro_) --extra[s];
    for (int s = 0; s < stages_; ++s)
      for (int k = 0; k < extra[s]; ++k)
        if (!put(s, kForward)) return false;
    for (int s = stages_ - 1; s >= 0; --s)
      if (!put(s, kInput)) return false;
    return true;
  }

  // One more forward on every stage that needs one, W's first where memory or a wait calls for them.
  bool forwards_of_a_step() {
    std::vector<char> wanted(stages_, 0);
    for (int s = 0; s < stages_; ++s) {
      if (count_[s][kForward] >= micro_) continue;
      wanted[s] = !(variant_.backward_first && s + 1 < stages_ && count_[s][kForward] >= count_[s + 1][kForward] + 2 &&
                    holds_back(s));
    }
    // A stage runs a forward only when the stage after it does: never more than it needs ahead.
    for (int s = stages_ - 2; s >= 0; --s) wanted[s] = std::min(wanted[s], wanted[s + 1]);
    for (int s = 0; s < stages_; ++s) {
      if (!wanted[s]) continue;
      if (!make_room(s, kForward)) return false;
      if (s > 0) fill_wait(s, end_of(kForward, s - 1, count_[s][kForward]) + to_next_[s - 1]);
      if (!put(s, kForward)) return false;
    }
    return true;
  }

  // Micro-batch mb's I on every stage, last to first.
  bool backwards_of_a_step(int mb) {
    for (int s = stages_ - 1; s >= 0; --s) {
      if (!make_room(s, kInput)) return false;
      if (s + 1 < stages_) fill_wait(s, end_of(kInput, s + 1, mb) + from_next_[s]);
      if (s == 0 && count_[s][kForward] == micro_)
        while (count_[s][kWeight] < count_[s][kInput]) put(s, kWeight);
      if (!put(s, kInput)) return false;
    }
    return true;
  }

  // Whether stage s, well ahead of the next, should hold its forward back so that its next I is not
  // delayed: the next stage's forward, I and the gradient's way back are what s waits for.
  bool holds_back(int s) const {
    const double gradient = free_at_[s + 1] + time_[s + 1][kForward] + time_[s + 1][kInput] + from_next_[s];
    if (free_at_[s] >= gradient) return true;
    double room = held_[s] + memory_[s][kForward], weights = 0;
    for (int w = count_[s][kWeight]; room > limit_[s] && w < count_[s][kInput]; ++w) {
      weights += time_[s][kWeight];
      room += memory_[s][kWeight];
    }
    if (free_at_[s] + time_[s][kForward] + weights <= gradient) return false;
    return gradient - free_at_[s] <= most_idle() - idle_[s];
  }

  // W's until the pass fits in memory; false when no W is left to free any.
  bool make_room(int s, Pass pass) {
    while (held_[s] + memory_[s][pass] > limit_[s]) {
      if (count_[s][kWeight] >= count_[s][kInput]) return false;
      put(s, kWeight);
    }
    return true;
  }

  // W's that end before the input arriving at `arrives`, then one more across it when the wait is
  // long compared with how much less this device has idled than the idlest (or always, when the
  // variant fills short waits too).
  void fill_wait(int s, double arrives) {
    while (count_[s][kWeight] < count_[s][kInput] && free_at_[s] + time_[s][kWeight] <= arrives) put(s, kWeight);
    if (count_[s][kWeight] >= count_[s][kInput] || free_at_[s] >= arrives) return;
    if (arrives - free_at_[s] > most_idle() - idle_[s] || variant_.fill_short_waits) put(s, kWeight);
  }

  // Places the stage's next pass of this kind at the end of its device's list, in the heuristic's time.
  bool put(int s, Pass pass) {
    const int mb = count_[s][pass];
    if (held_[s] + memory_[s][pass] > limit_[s]) return false;
    if (pass == kInput && count_[s][kForward] <= mb) return false;  // (the same case as in run())
    const double unhindered = free_at_[s] + time_[s][pass];
    double end = unhindered;
    if (pass == kForward && s > 0) end = std::max(end, end_of(kForward, s - 1, mb) + to_next_[s - 1] + time_[s][pass]);
    if (pass == kInput && s + 1 < stages_)
      end = std::max(end, end_of(kInput, s + 1, mb) + from_next_[s] + time_[s][pass]);
    if (count_[s][kForward] > 0) idle_[s] += end - unhindered;
    free_at_[s] = end;
    ends_[key(pass, s, mb)] = end;
    held_[s] += memory_[s][pass];
    ++count_[s][pass];
    static constexpr ActionKind kinds[] = {ActionKind::F, ActionKind::I, ActionKind::W};
    schedule_.device_actions[schedule_.stage_device[s]].push_back(Action::make(kinds[pass], s, mb));
    return true;
  }

  double most_idle() const { return *std::max_element(idle_.begin(), idle_.end()); }
  size_t key(Pass pass, int s, int mb) const { return (static_cast<size_t>(pass) * stages_ + s) * micro_ + mb; }
  double end_of(Pass pass, int s, int mb) const { return ends_[key(pass, s, mb)]; }

  Schedule schedule_;
  ZeroBubbleVariant variant_;
  int stages_, micro_;
  std::vector<std::array<double, 3>> time_ = std::vector<std::array<double, 3>>(stages_);
  std::vector<std::array<double, 3>> memory_ = std::vector<std::array<double, 3>>(stages_);
  std::vector<std::array<int, 3>> count_ = std::vector<std::array<int, 3>>(stages_, {0, 0, 0});
  std::vector<double> limit_ = std::vector<double>(stages_, 0), to_next_ = limit_, from_next_ = limit_,
                      free_at_ = limit_, held_ = limit_, idle_ = limit_;
  std::vector<double> ends_ = std::vector<double>(static_cast<size_t>(3) * stages_ * micro_, 0);
};

}  // namespace

std::array<ZeroBubbleVariant, 8> zero_bubble_variants() {
  std::array<ZeroBubbleVariant, 8> out{};
  int i = 0;
  for (bool bubble : {true, false})
    for (bool backward_first : {true, false})
      for (bool fill : {true, false}) out[i++] = {bubble, backward_first, fill};
  return out;
}

std::optional<Schedule> zero_bubble_order(const Schedule& skeleton, const CostTable& costs, ZeroBubbleVariant variant) {
  return ZeroBubbleGreedy(skeleton, costs, variant).run();
}

}  // namespace flexpipe
