#pragma once
// Internal to the schedule language: the `greedy` ordering policy, a list scheduler in simulated
// integer time that writes every device's list.
#include <array>
#include <cstdint>
#include <vector>

#include "flexpipe/core/schedule.h"

namespace flexpipe::lang {

struct GreedyPolicy {
  std::vector<ActionKind> prefer;  // most urgent first: {F, B} or {F, I, W} in any order
  std::array<int64_t, kNumActionKinds> time{};  // per kind, >= 1
  std::vector<int64_t> inflight;   // per device: forwards started without their B / W started; < 0: no limit
};

// Fills schedule.device_actions (placement and micro-batches already set). Throws Error when no
// device can start an action while some remain, or when it takes more than `step_budget` decisions.
void schedule_greedy(Schedule& schedule, const GreedyPolicy& policy, int64_t step_budget);

}  // namespace flexpipe::lang
