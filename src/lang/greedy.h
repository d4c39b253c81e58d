// The schedule language's `greedy` ordering policy (internal).
#pragma once
// Internal to the schedule language: the `greedy` ordering policy, a list scheduler in simulated
// integer time that writes every device's list, or reorders the lists the program wrote.
#include <array>
#include <cstdint>
#include <vector>

#include "flexpipe/ir/schedule.h"

namespace flexpipe::lang {

struct GreedyPolicy {
  std::vector<ActionKind> prefer;               // most urgent first: {F, B} or {F, I, W} in any order; empty: `written`
  std::vector<ActionKind> cooldown;             // once a device has started its last F: these kinds first, in order
  std::array<int64_t, kNumActionKinds> time{};  // per kind, >= 1
  std::vector<int64_t> inflight;  // per device: forwards started without their B / W started; < 0: no limit
  bool written() const { return prefer.empty(); }
};

// Fills schedule.device_actions (placement and micro-batches already set). With a `written` policy
// the lists already there are the priority: they must hold one F and one B, or one I and one W, of
// every stage and micro-batch of its pipeline, and nothing else (the caller checks). Returns, per
// device, the written position of each action of the new list (nothing without `written`).
// Throws Error when no device can start an action while some remain, or when it takes more than
// `step_budget` decisions.
std::vector<std::vector<int>> schedule_greedy(Schedule& schedule, const GreedyPolicy& policy, int64_t step_budget);

}  // namespace flexpipe::lang
