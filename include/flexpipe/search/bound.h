// A lower bound on the makespan of every order of a placement: what the search prunes with and
// reports its answers against (docs/search.md, "Lower bounds").
#pragma once

#include <vector>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"

namespace flexpipe {

// What no order of `skeleton`'s placement (any number of pipelines, its micro-batches) beats under
// `costs`. Per device, the preemptive optimum of its own operations: each has a release (its
// earliest start along the pipeline, the k-th forward of a stage after k forwards of the stage
// before) and a tail (what must follow it: the rest of its micro-batch's way, the operations of its
// stage after it), and Jackson's rule (longest tail first, preempting) schedules them optimally
// when they may be interrupted. Also the closed-form path terms: one micro-batch's way up and down,
// the last forward of a stage, the first backward's arrival plus m backwards. `split`: backwards
// are I and W (I on paths), else B. `recompute` (per global stage, or empty): an R after the
// stage's F and before its I.
double schedule_lower_bound(const Schedule& skeleton, const CostTable& costs, bool split,
                            const std::vector<char>& recompute = {});

// Only the closed-form path terms of schedule_lower_bound: O(stages) instead of a sort of every
// operation, for ranking and pruning thousands of candidates; never above schedule_lower_bound.
double schedule_path_bound(const Schedule& skeleton, const CostTable& costs, bool split,
                           const std::vector<char>& recompute = {});

}  // namespace flexpipe
