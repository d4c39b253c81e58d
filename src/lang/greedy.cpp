// The `greedy` policy: a list scheduler in simulated integer time over the program's lists.
#include "greedy.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::lang {

namespace {

// The list scheduler keeps, per (kind, stage), which micro-batches are done, and per device the
// running action. Time jumps from one completion to the next; at each instant every idle device,
// in device order, starts its most urgent ready action: by kind (`prefer`), or the first of its
// written list (`written`).
class GreedyScheduler {
 public:
  GreedyScheduler(Schedule& schedule, const GreedyPolicy& policy, int64_t budget)
      : s_(schedule), policy_(policy), budget_(budget), stages_(schedule.num_stages()), m_(schedule.num_microbatches) {
    for (int kind = 0; kind < kKinds; ++kind) {
      end_[kind].assign(static_cast<size_t>(stages_) * m_, kNever);
      first_pending_[kind].assign(stages_, 0);
    }
    forwards_left_.assign(s_.num_devices, 0);
    cooldown_rank_.fill(static_cast<int>(policy.cooldown.size()));
    for (size_t i = 0; i < policy.cooldown.size(); ++i)
      cooldown_rank_[static_cast<int>(policy.cooldown[i])] = static_cast<int>(i);
    if (policy.written()) {
      written_ = std::move(s_.device_actions);
      s_.device_actions.assign(s_.num_devices, {});
      positions_.resize(s_.num_devices);
      taken_.resize(s_.num_devices);
      head_.assign(s_.num_devices, 0);
      for (int d = 0; d < s_.num_devices; ++d) {
        taken_[d].assign(written_[d].size(), false);
        remaining_ += static_cast<int64_t>(written_[d].size());
        for (const Action& a : written_[d]) {
          split_ = split_ || a.kind == ActionKind::I;
          forwards_left_[d] += a.kind == ActionKind::F;
        }
      }
      return;
    }
    split_ = std::find(policy.prefer.begin(), policy.prefer.end(), ActionKind::W) != policy.prefer.end();
    cooling_prefer_ = policy.cooldown;
    for (ActionKind kind : policy.prefer)
      if (cooldown_rank_[static_cast<int>(kind)] == static_cast<int>(policy.cooldown.size()))
        cooling_prefer_.push_back(kind);
    device_stages_.resize(s_.num_devices);
    for (int st = 0; st < stages_; ++st) device_stages_[s_.stage_device[st]].push_back(st);
    for (int st = 0; st < stages_; ++st)
      for (int mb = 0; mb < m_; ++mb)
        if (in_pipeline(st, mb)) {
          remaining_ += split_ ? 3 : 2;
          ++forwards_left_[s_.stage_device[st]];
        }
  }

  std::vector<std::vector<int>> run() {
    std::vector<int64_t> busy_until(s_.num_devices, 0);
    std::vector<int64_t> in_flight(s_.num_devices, 0);
    int64_t now = 0;
    while (remaining_ > 0) {
      for (int d = 0; d < s_.num_devices; ++d) {
        if (busy_until[d] > now) continue;
        if (--budget_ < 0) throw Error("the greedy policy ran past the step limit");
        const Candidate c = policy_.written() ? choose_written(d, now, in_flight[d]) : choose(d, now, in_flight[d]);
        if (c.kind < 0) continue;
        const ActionKind kind = static_cast<ActionKind>(c.kind);
        const int64_t end = now + policy_.time[c.kind];
        end_[slot(kind)][index(c.stage, c.mb)] = end;
        busy_until[d] = end;
        in_flight[d] += in_flight_delta(kind);
        if (kind == ActionKind::F) --forwards_left_[d];
        s_.device_actions[d].push_back(Action::make(kind, c.stage, c.mb));
        if (c.position >= 0) take(d, c.position);
        --remaining_;
      }
      int64_t next = std::numeric_limits<int64_t>::max();
      for (int d = 0; d < s_.num_devices; ++d)
        if (busy_until[d] > now) next = std::min(next, busy_until[d]);
      if (next == std::numeric_limits<int64_t>::max() && remaining_ > 0) stalled(in_flight);
      now = next;
    }
    return std::move(positions_);
  }

 private:
  static constexpr int kKinds = 4;  // F, B, I, W
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  struct Candidate {
    int kind = -1, stage = -1, mb = -1;
    int position = -1;  // in the written list
  };

  static int slot(ActionKind kind) {
    switch (kind) {
      case ActionKind::F: return 0;
      case ActionKind::B: return 1;
      case ActionKind::I: return 2;
      default: return 3;
    }
  }
  size_t index(int stage, int mb) const { return static_cast<size_t>(stage) * m_ + mb; }
  bool done(ActionKind kind, int stage, int mb, int64_t now) const { return end_[slot(kind)][index(stage, mb)] <= now; }
  bool started(ActionKind kind, int stage, int mb) const { return end_[slot(kind)][index(stage, mb)] != kNever; }
  int in_flight_delta(ActionKind kind) const {
    if (kind == ActionKind::F) return 1;
    return kind == (split_ ? ActionKind::W : ActionKind::B) ? -1 : 0;
  }
  bool cooling(int d) const { return !policy_.cooldown.empty() && forwards_left_[d] == 0; }

  bool ready(ActionKind kind, int stage, int mb, int64_t now) const {
    const ActionKind backward = split_ ? ActionKind::I : ActionKind::B;
    switch (kind) {
      case ActionKind::F: return s_.is_first_stage(stage) || done(ActionKind::F, stage - 1, mb, now);
      case ActionKind::B:
      case ActionKind::I:
        return done(ActionKind::F, stage, mb, now) && (s_.is_last_stage(stage) || done(backward, stage + 1, mb, now));
      default: return done(ActionKind::I, stage, mb, now);
    }
  }

  Candidate choose(int d, int64_t now, int64_t in_flight) {
    for (ActionKind kind : cooling(d) ? cooling_prefer_ : policy_.prefer) {
      if (kind == ActionKind::F && policy_.inflight[d] >= 0 && in_flight >= policy_.inflight[d]) continue;
      Candidate best;
      for (int stage : device_stages_[d]) {
        int& first = first_pending_[slot(kind)][stage];
        while (first < m_ && (started(kind, stage, first) || !in_pipeline(stage, first))) ++first;
        for (int mb = first; mb < m_ && (best.mb < 0 || mb < best.mb); ++mb) {
          if (!in_pipeline(stage, mb) || started(kind, stage, mb)) continue;
          if (ready(kind, stage, mb, now)) {
            best = {static_cast<int>(kind), stage, mb};
            break;
          }
        }
      }
      if (best.kind >= 0) return best;
    }
    return {};
  }

  // The first ready action of the written list (by cool-down rank first, when cooling). A forward
  // may run ahead of actions written before it only if, with it, the count in flight stays within
  // the limit at each of them: `peak_before` is the highest count the list reaches before it.
  Candidate choose_written(int d, int64_t now, int64_t in_flight) const {
    const std::vector<Action>& list = written_[d];
    const int64_t limit = policy_.inflight[d];
    const bool cool = cooling(d);
    int64_t level = in_flight, peak_before = in_flight;
    Candidate best;
    int best_rank = std::numeric_limits<int>::max();
    for (size_t j = head_[d]; j < list.size(); ++j) {
      if (taken_[d][j]) continue;
      const Action& a = list[j];
      if (ready(a.kind, a.stage, a.microbatch, now) && (a.kind != ActionKind::F || limit < 0 || peak_before < limit)) {
        const int rank = cool ? cooldown_rank_[static_cast<int>(a.kind)] : 0;
        if (rank < best_rank) {
          best = {static_cast<int>(a.kind), a.stage, a.microbatch, static_cast<int>(j)};
          best_rank = rank;
          if (rank == 0) break;
        }
      }
      level += in_flight_delta(a.kind);
      peak_before = std::max(peak_before, level);
    }
    return best;
  }

  void take(int d, int position) {
    taken_[d][position] = true;
    positions_[d].push_back(position);
    while (head_[d] < taken_[d].size() && taken_[d][head_[d]]) ++head_[d];
  }

  bool in_pipeline(int stage, int mb) const { return s_.pipeline_of_microbatch(mb) == s_.pipeline_of_stage(stage); }

  [[noreturn]] void stalled(const std::vector<int64_t>& in_flight) const {
    for (int d = 0; d < s_.num_devices; ++d)
      if (policy_.inflight[d] >= 0 && in_flight[d] >= policy_.inflight[d])
        throw Error(
            fmt::format("the greedy policy stalls: no device can start an action ({} actions left); device {} "
                        "has {} micro-batches in flight, its `inflight` limit",
                        remaining_, d, in_flight[d]));
    throw Error(fmt::format("the greedy policy stalls: no device can start an action ({} actions left)", remaining_));
  }

  Schedule& s_;
  const GreedyPolicy& policy_;
  int64_t budget_;
  int stages_, m_;
  bool split_ = false;
  int64_t remaining_ = 0;
  std::vector<int64_t> end_[kKinds];        // per kind, (stage, micro-batch): end time; kNever before it starts
  std::vector<int> first_pending_[kKinds];  // per kind, stage: no micro-batch below it is pending
  std::vector<std::vector<int>> device_stages_;
  std::vector<int> forwards_left_;                    // per device: forwards not yet started
  std::array<int, kNumActionKinds> cooldown_rank_{};  // per kind: position in `cooldown`, its size if absent
  std::vector<ActionKind> cooling_prefer_;            // `cooldown`, then the rest of `prefer`
  // `written` only: the program's lists, which of their actions have run, the first that has not,
  // and the written position of each action run.
  std::vector<std::vector<Action>> written_;
  std::vector<std::vector<bool>> taken_;
  std::vector<size_t> head_;
  std::vector<std::vector<int>> positions_;
};

}  // namespace

std::vector<std::vector<int>> schedule_greedy(Schedule& schedule, const GreedyPolicy& policy, int64_t step_budget) {
  return GreedyScheduler(schedule, policy, step_budget).run();
}

}  // namespace flexpipe::lang
