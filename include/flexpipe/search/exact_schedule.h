// An exact scheduler for small pipeline instances: depth-first branch and bound over every
// per-device order of the compute actions, for measuring how far heuristics and the built-in
// schedules are from the optimum on instances small enough to settle (a few devices, a handful of
// micro-batches).
//
// The search space is every compute-only schedule (F and B, or F, I and W) that respects the
// dependencies and each device's memory capacity (the simulator's semantics: F allocates at its
// start, B / I / W free at their end, events at one time count together, static memory is the
// device's parameters, gradients and optimizer state), restricted to running the micro-batches of
// one (stage, kind) in increasing order. Micro-batches cost the same, so this is the usual symmetry
// reduction (it divides the space by up to m! per (stage, kind)); orders that overtake one
// micro-batch with another between stages are outside the space, and "optimal" means within it.
//
// Search: nodes place actions in nondecreasing start time, pruned by a lower bound and by a memo of
// dominated partial schedules (exact_schedule.cpp). p = 4, m = 6 settles in milliseconds to a few
// seconds; memory-bound instances with unequal stages and m >= 10 may not finish in the time limit.
//
// Timing is the simulator's for a lowered schedule: one compute stream per device running its list
// in order, each transfer on its directed link's FIFO in the sender's list order. The search models
// the FIFO exactly, so its makespans are the simulator's; the returned makespan is nevertheless
// re-simulated (simulate(lower(schedule), costs)), so it is the simulator's value by construction.
// Only the lower bounds ignore link contention, which keeps them bounds.
#pragma once
#include <cstdint>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"

namespace flexpipe {

struct ExactOptions {
  double time_limit_seconds = 10;  // stop and return the best found so far (proven_optimal = false)
  // Stop after about this many nodes (checked every 4096), likewise; 0: no limit. Unlike the time
  // limit it stops at the same node on any machine, so the result does not depend on its speed.
  int64_t max_nodes = 0;
  double upper_bound = kInfinity;  // an incumbent makespan: only schedules strictly better are searched for
  double memo_megabytes = 256;     // the dominance memo stops growing here (it only speeds the search up)
};

struct ExactResult {
  bool found = false;           // a schedule strictly better than options.upper_bound was found
  bool proven_optimal = false;  // the search finished: nothing better than `makespan` (or, when
                                // nothing was found, than upper_bound) exists in the space
  Schedule schedule;            // compute-only (F and B, or F, I and W), valid; the skeleton when !found
  double makespan = kInfinity;  // simulate(lower(schedule), costs).makespan
  int64_t nodes = 0;            // search nodes expanded
  double seconds = 0;
};

// skeleton: a Schedule from make_schedule(...) with one pipeline (num_pipelines == 1), placement and
// micro-batch count set and no actions; any placement works (loop, V, several stages per device).
// split_backward: every backward is I then W; else B.
// Throws Error for a skeleton or cost table it cannot search (several pipelines, actions present,
// custom operations, a table that does not fit, negative or non-finite costs or transfer times,
// and with split_backward a freed_by_input outside [0, activation_bytes]).
// The time and node limits are checked every 4096 nodes.
ExactResult exact_schedule(const Schedule& skeleton, const CostTable& costs, bool split_backward,
                           const ExactOptions& options = {});

}  // namespace flexpipe
