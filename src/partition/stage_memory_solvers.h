// Internal: the solvers behind optimize_stage_memory and least_stage_memory, for one way of holding checkpoints.
#pragma once
#include <cstddef>

#include "flexpipe/partition/stage_memory.h"

namespace flexpipe::partition {

// Points per Pareto set: the exact solver's proof keeps up to kMaxParetoPoints; `auto` caps its
// sets at kAutoParetoPoints (the cheapest in time kept), trading the proof for time, since a tight
// budget grows them fast and the search calls the solver thousands of times.
constexpr size_t kMaxParetoPoints = 4096;
constexpr size_t kAutoParetoPoints = 64;

// Free offloads, then recompute chains and paid offloads by bytes saved per time added; never exact.
StageMemoryPlan solve_greedy(const OperatorTable& ops, int begin, int end, const StageContext& context);
// The dynamic program over the operators with Pareto sets of at most `max_points` points each; exact
// when no set had to be cut.
StageMemoryPlan solve_exact(const OperatorTable& ops, int begin, int end, const StageContext& context,
                            size_t max_points);
// The decisions with the least memory, whatever they cost in time.
StageMemoryPlan least_memory_holding_checkpoints_one_way(const OperatorTable& ops, int begin, int end,
                                                         const StageContext& context);

}  // namespace flexpipe::partition
