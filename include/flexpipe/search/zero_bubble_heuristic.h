// Zero Bubble's greedy heuristic for one stage per device (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024, section 3.1; `manual_order` in the authors' auto_schedule.py): per-device
// orders of F, I and W under a memory limit, built in the heuristic's own estimate of time, for any
// number of micro-batches. The search offers its eight variants as candidates (docs/search.md,
// "Method"), so that its answer is never slower than the heuristic's best.
#pragma once
#include <array>
#include <optional>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"

namespace flexpipe {

// The heuristic's three switches (the authors' names in brackets).
struct ZeroBubbleVariant {
  // [allow_bubble_before_first_b] Warm-up forwards stop when the next one would end after the first
  // gradient arrives (a short wait before the first I), rather than once the device is busy until it
  // arrives.
  bool bubble_before_first_backward = false;
  // [prioritize_b] A device two or more forwards ahead of the next one skips its forward when that
  // would delay the next device's forward and I.
  bool backward_first = false;
  // [no_bubble_greedy] A wait shorter than what this device may still idle compared with the idlest
  // device is filled with a W anyway (which may run past the input's arrival); else it is left idle.
  bool fill_short_waits = true;
  friend bool operator==(const ZeroBubbleVariant&, const ZeroBubbleVariant&) = default;
};

// The eight variants, in the authors' order (each switch true, then false).
std::array<ZeroBubbleVariant, 8> zero_bubble_variants();

// The heuristic's order for `skeleton` (one stage per device on one pipeline; its placement and
// micro-batch count; any actions are replaced): F, I and W on every device, with transfers taking
// their link's time and each device holding at most its capacity less its stages' static and
// workspace bytes in activations (F allocates activation_bytes, I frees freed_by_input, W the rest).
// Nothing when the limit leaves no room for a forward, which the authors report as "Cannot fit
// memory".
std::optional<Schedule> zero_bubble_order(const Schedule& skeleton, const CostTable& costs, ZeroBubbleVariant variant);

}  // namespace flexpipe
