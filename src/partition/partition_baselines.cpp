// The baselines the partitioner is measured against: whole layers split evenly (uniform), by
// parameters, by compute (PipeDream), and vPipe's swap-or-recompute of whole layers.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "stage_cost.h"

namespace flexpipe::partition {

namespace {

// Min-max contiguous split of `weights` into `stages` non-empty parts (exact dynamic programming);
// returns the first unit of each part, then the unit count. best[s][u], the least largest part over
// the first u units in s parts, is the least over the last cut c of max(best[s - 1][c], sum(c, u)),
// the first such c on ties. best[s - 1][c] grows with c and sum(c, u) falls (both exactly, in
// floating point too: sums of non-negative weights only grow), so the least lies where they cross:
// left of the crossing the sum decides, right of it best[s - 1][c]. Two bisections find it, so the
// table takes O(S U log U) where a scan over every c took O(S U^2) (minutes on 200 k operators).
std::vector<int> balance(const std::vector<double>& weights, int stages) {
  const int units = static_cast<int>(weights.size());
  std::vector<double> prefix(units + 1, 0);
  for (int u = 0; u < units; ++u) prefix[u + 1] = prefix[u] + weights[u];
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(units + 1, kInfinity));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(units + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    const std::vector<double>& before = best[s - 1];
    for (int u = s; u <= units; ++u) {
      auto sum = [&](int c) { return prefix[u] - prefix[c]; };
      const int first = s - 1, last = u - 1;
      // The crossing: the first c where best[s - 1][c] >= sum(c, u) (last + 1 when none is).
      int lo = first, hi = last + 1;
      while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (before[mid] >= sum(mid))
          hi = mid;
        else
          lo = mid + 1;
      }
      const int cross = lo;
      double value = kInfinity;
      int at = 0;
      if (cross > first) {
        // Left of it the sum decides; its least is at cross - 1, and first reached where it stops falling.
        value = sum(cross - 1);
        int a = first, b = cross - 1;
        while (a < b) {
          const int mid = a + (b - a) / 2;
          if (sum(mid) <= value)
            b = mid;
          else
            a = mid + 1;
        }
        at = a;
      }
      if (cross <= last && before[cross] < value) value = before[cross], at = cross;
      if (value < kInfinity) best[s][u] = value, cut[s][u] = at;
    }
  }
  std::vector<int> starts(stages + 1, units);
  for (int s = stages, u = units; s > 0; --s) {
    u = cut[s][u];
    starts[s - 1] = u;
  }
  return starts;
}

// Units are layers when there are at least as many as stages, else operators.
std::vector<int> unit_starts(const PartitionProblem& problem) {
  if (static_cast<int>(problem.layer_starts.size()) >= problem.num_stages()) return problem.layer_starts;
  std::vector<int> all(problem.ops.size());
  std::iota(all.begin(), all.end(), 0);
  return all;
}

std::vector<int> to_operator_starts(const std::vector<int>& units, const std::vector<int>& unit_split, int n) {
  std::vector<int> starts;
  for (size_t s = 0; s + 1 < unit_split.size(); ++s) starts.push_back(units[unit_split[s]]);
  starts.push_back(n);
  return starts;
}

}  // namespace

std::vector<int> balanced_by(const PartitionProblem& problem, const std::vector<double>& per_operator) {
  const std::vector<int> units = unit_starts(problem);
  const int n = problem.ops.size();
  std::vector<double> weights;
  for (size_t u = 0; u < units.size(); ++u) {
    const int end = u + 1 < units.size() ? units[u + 1] : n;
    weights.push_back(std::accumulate(per_operator.begin() + units[u], per_operator.begin() + end, 0.0));
  }
  return to_operator_starts(units, balance(weights, problem.num_stages()), n);
}

std::vector<int> uniform_starts(const PartitionProblem& problem) {
  const std::vector<int> units = unit_starts(problem);
  const int count = static_cast<int>(units.size()), stages = problem.num_stages();
  std::vector<int> split;
  for (int s = 0; s <= stages; ++s) split.push_back(static_cast<int>(int64_t(s) * count / stages));
  return to_operator_starts(units, split, problem.ops.size());
}

// vPipe-like: within each stage over its budget, whole layers are swapped or recomputed (a swapped
// one may later be recomputed), the most bytes saved per time added first, until it fits.
PartitionResult vpipe_partition(const PartitionProblem& problem, StageCost& cost, const std::vector<int>& starts) {
  const int stages = problem.num_stages(), n = problem.ops.size();
  double period = 0;
  for (int s = 0; s < stages; ++s) period = std::max(period, cost.compute(starts[s], starts[s + 1]));
  const std::vector<int> units = unit_starts(problem);
  PartitionResult result;
  result.method = PartitionMethod::VPipe;
  result.fits = true;
  for (int s = 0; s < stages; ++s) {
    const int begin = starts[s], end = starts[s + 1];
    const StageContext context = cost.context(s, period);
    std::vector<MemoryDecision> decisions(end - begin, MemoryDecision::Keep);
    StageMemoryPlan plan = evaluate_stage_memory(problem.ops, begin, end, context, decisions);
    for (int moves = 0; !plan.fits && !cost.stopped(); ++moves) {
      cost.enter("whole-layer decisions", moves);
      StageMemoryPlan best_plan, climb_plan;
      double best_ratio = -1, climb_saved = -kInfinity;
      std::vector<MemoryDecision> best_decisions, climb_decisions;
      for (size_t u = 0; u < units.size(); ++u) {
        const int ub = std::max(units[u], begin), ue = std::min(u + 1 < units.size() ? units[u + 1] : n, end);
        if (ub >= ue || decisions[ub - begin] == MemoryDecision::Recompute) continue;
        // A swapped layer may still be recomputed instead: swapping saves at most the copies the
        // transfers do not keep on the device.
        for (MemoryDecision choice : {MemoryDecision::Recompute, MemoryDecision::Offload}) {
          if (choice == decisions[ub - begin]) continue;
          if (choice == MemoryDecision::Offload && (problem.host_bandwidth <= 0 || context.in_flight <= 3)) continue;
          std::vector<MemoryDecision> trial = decisions;
          for (int v = ub; v < ue; ++v) trial[v - begin] = choice;
          const StageMemoryPlan candidate = evaluate_stage_memory(problem.ops, begin, end, context, trial);
          const double saved = plan.memory - candidate.memory;
          const double added = candidate.added_time() - plan.added_time();
          if (added == kInfinity) continue;
          // The first recomputed layer can save nothing: its rebuild costs what keeping it did at
          // k = 1. Later ones save their bytes, so when no move saves anything the one that loses
          // least is the way on.
          if (saved > climb_saved) climb_saved = saved, climb_plan = candidate, climb_decisions = trial;
          if (saved <= 0) continue;
          const double ratio = added > 0 ? saved / added : kInfinity;
          if (ratio > best_ratio) best_ratio = ratio, best_plan = candidate, best_decisions = std::move(trial);
        }
      }
      if (best_ratio < 0 && climb_decisions.empty()) break;
      decisions = std::move(best_ratio < 0 ? climb_decisions : best_decisions);
      plan = best_ratio < 0 ? climb_plan : best_plan;
    }
    StageResult r;
    r.begin = begin;
    r.end = end;
    r.compute_time = cost.compute(begin, end);
    r.memory = plan;
    r.time = r.compute_time + plan.added_time();
    if (!plan.fits) {
      result.fits = false;
      result.shortfall = std::max(result.shortfall, plan.memory - problem.budget[s]);
    }
    result.stages.push_back(std::move(r));
  }
  result.bottleneck = 0;
  for (const StageResult& r : result.stages) result.bottleneck = std::max(result.bottleneck, r.time);
  if (!result.fits) result.bottleneck = kInfinity;
  return result;
}

}  // namespace flexpipe::partition
