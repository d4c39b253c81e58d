// The choice among the stage memory solvers, for both ways of holding checkpoints (docs/partitioner.md).
#include <algorithm>
#include <utility>

#include "flexpipe/partition/stage_memory.h"
#include "stage_memory_solvers.h"
#include "stage_memory_terms.h"

namespace flexpipe {

const char* memory_solver_name(MemorySolver solver) {
  switch (solver) {
    case MemorySolver::Exact: return "exact";
    case MemorySolver::Greedy: return "greedy";
    case MemorySolver::Auto: return "auto";
  }
  return "auto";
}

namespace {

StageMemoryPlan optimize_holding_checkpoints_one_way(const OperatorTable& ops, int begin, int end,
                                                     const StageContext& context, MemorySolver solver) {
  StageMemoryPlan plan;
  if (solver == MemorySolver::Exact)
    plan = partition::solve_exact(ops, begin, end, context, partition::kMaxParetoPoints);
  else if (solver == MemorySolver::Auto && end - begin <= kExactSolverOperators)
    plan = partition::solve_exact(ops, begin, end, context, partition::kAutoParetoPoints);
  else
    plan = partition::solve_greedy(ops, begin, end, context);
  if (!plan.fits && context.allow_offload && context.allow_recompute) {
    // The greedy never recomputes what it chose to offload, and offloading saves at most the copies
    // the transfers do not hold: without offloading it may still fit.
    StageContext recompute_only = context;
    recompute_only.allow_offload = false;
    StageMemoryPlan without = partition::solve_greedy(ops, begin, end, recompute_only);
    if (without.fits) {
      plan = evaluate_stage_memory(ops, begin, end, context, without.decisions);
      plan.exact = false;
    }
  }
  if (!plan.fits) {
    // The greedy can miss a fit the least-memory decisions reach: then those are the answer.
    StageMemoryPlan least = partition::least_memory_holding_checkpoints_one_way(ops, begin, end, context);
    least.exact = plan.exact && !least.fits;
    return least;
  }
  return plan;
}

// Whether a is the better answer: it fits where b does not, is faster where both fit, and holds less
// where neither fits.
bool better_plan(const StageMemoryPlan& a, const StageMemoryPlan& b) {
  if (a.fits != b.fits) return a.fits;
  return a.fits ? a.added_time() < b.added_time() : a.memory < b.memory;
}

// The better of the two ways of holding checkpoints; exact when both answers are. An answer of the
// second way that recomputes nothing has no checkpoints to offload: the plan file, the aggregation
// and the runtime run it as plain offloading (its RELOAD a compute action ahead of the backward, not
// right before R), so it is priced that way (the first way's answer is then at least as good).
template <typename Solve>
StageMemoryPlan either_way(const OperatorTable& ops, int begin, int end, const StageContext& context,
                           const Solve& solve) {
  StageMemoryPlan plan = solve(context);
  if (context.offload_checkpoints || !can_offload_checkpoints(context) || (plan.fits && plan.added_time() == 0))
    return plan;
  StageContext offloading = context;
  offloading.offload_checkpoints = true;
  StageMemoryPlan other = solve(offloading);
  if (std::find(other.decisions.begin(), other.decisions.end(), MemoryDecision::Recompute) == other.decisions.end()) {
    const bool exact = other.exact;
    other = evaluate_stage_memory(ops, begin, end, context, other.decisions);
    other.exact = exact;
  }
  const bool exact = plan.exact && other.exact;
  if (better_plan(other, plan)) plan = std::move(other);
  plan.exact = exact;
  return plan;
}

}  // namespace

StageMemoryPlan least_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& stage_context) {
  const StageContext context = partition::checked_stage_context(ops, begin, end, stage_context);
  return either_way(ops, begin, end, context, [&](const StageContext& c) {
    return partition::least_memory_holding_checkpoints_one_way(ops, begin, end, c);
  });
}

StageMemoryPlan optimize_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& stage_context,
                                      MemorySolver solver) {
  const StageContext context = partition::checked_stage_context(ops, begin, end, stage_context);
  return either_way(ops, begin, end, context, [&](const StageContext& c) {
    return optimize_holding_checkpoints_one_way(ops, begin, end, c, solver);
  });
}

}  // namespace flexpipe
