// Memory-aware pipeline partitioning on the operator graph (DawnPiper) and the baselines it is
// compared with. Stages are contiguous operator ranges in the graph's (topological) order; each
// stage decides per operator whether to keep, recompute or offload what it saves for the backward.
// Algorithm, theorem and assumptions: docs/partitioner.md.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "flexpipe/partition/stage_memory.h"

namespace flexpipe {

enum class PartitionMethod : uint8_t {
  Dawn,        // binary search on the bottleneck time with per-stage memory optimization
  Uniform,     // equal transformer layers per stage (Megatron's default), nothing recomputed
  Params,      // layers balanced by parameter count (DeepSpeed's "parameters"), nothing recomputed
  PipeDream,   // layers balanced by compute time (PipeDream's planner), nothing recomputed
  VPipe,       // PipeDream's split, then whole layers swapped or recomputed greedily where over the limit
  Exhaustive,  // every operator partition, each stage optimized: the reference for small graphs
};
const char* partition_method_name(PartitionMethod method);
// "dawn", "uniform", "params", "pipedream", "vpipe", "exhaustive"; throws Error listing them.
PartitionMethod parse_partition_method(const std::string& name);

// What a partitioner run reports as it goes (PartitionProblem::progress): the phase it is in, in
// order, and how far it got. Dawn: "a partition that fits", then either "what would fit" (when
// nothing does) or "a period that fits", "bisection", "every reachable cut", "bisection over every
// reachable cut" (where it finds more), and "stage decisions"; the baselines: "stage decisions", and
// vPipe's "whole-layer decisions".
struct PartitionProgress {
  std::string phase;
  int step = 0;               // steps of the phase done
  double period = kInfinity;  // the least bottleneck a partition is known to meet so far; kInfinity: none
  int64_t evaluations = 0;    // stage evaluations so far
};

struct PartitionProblem {
  OperatorTable ops;
  std::vector<int> layer_starts;  // first operator of each layer, ascending, starting at 0
  std::vector<int> in_flight;     // per stage (model chunk), from the schedule
  // Per cut position j (between operators j-1 and j, 0..n): whether a stage boundary may fall there.
  // Empty: anywhere. make_partition_problem allows the cuts whose crossing tensors are at most twice
  // the first quartile of all crossings (between layers, and inside a block where only the residual
  // stream and one hidden-sized tensor cross), not those that would send attention maps or 4h-wide
  // activations; every cut when that leaves too few.
  std::vector<char> cut_allowed;
  std::vector<double> budget;  // per stage: the device's memory over the chunks it holds
  double host_bandwidth = 0;   // bytes per time unit; 0: no offloading
  double bytes_per_parameter = 16;
  bool split_backward = false;  // the schedule splits backwards into I and W (StageContext)
  MemorySolver solver = MemorySolver::Auto;
  // Checked between the bisection's steps (Dawn's, and the period's of every method that optimizes
  // stage memory), between vPipe's moves, and by the stage memory solvers between theirs:
  // when it returns true, the search stops and answers with the best partition found so far (the
  // first feasible one at least), and a stage whose solver was stopped holds its least-memory
  // decisions (StageContext::should_stop). Empty: never.
  std::function<bool()> should_stop;
  // Called at every step of the phases above and after every stage evaluation (seconds each on stages
  // of tens of thousands of operators), for progress lines. Empty: never.
  std::function<void(const PartitionProgress&)> progress;
  // When nothing fits, bisect on the extra bytes per device that would (PartitionResult::shortfall).
  // Callers that only need to know whether it fits (the search) skip that work.
  bool measure_shortfall = true;
  int num_stages() const { return static_cast<int>(in_flight.size()); }
};

// The problem for `graph` at `shape` under `schedule` (in-flight counts and chunk placement) with
// `memory_limit` bytes per device.
PartitionProblem make_partition_problem(const CostGraph& graph, const Shape& shape, const Schedule& schedule,
                                        double memory_limit, double host_bandwidth, double bytes_per_parameter = 16);

struct StageResult {
  int begin = 0;  // operators [begin, end)
  int end = 0;
  double compute_time = 0;  // F + B per micro-batch
  double time = 0;          // compute + what the memory decisions add
  StageMemoryPlan memory;
};

struct PartitionResult {
  PartitionMethod method = PartitionMethod::Dawn;
  std::vector<StageResult> stages;
  double bottleneck = kInfinity;  // the largest stage time (the steady-state period)
  bool fits = false;
  double shortfall = 0;     // when it does not fit: the most bytes a stage lacks even with every decision
  int64_t evaluations = 0;  // stage-cost evaluations the search made
  // Dawn: the fewest operators of any range the memory solver optimized (none: the largest int). Above
  // kExactSolverOperators, the greedy and the auto solver made the same calls, so the same plan.
  int smallest_optimized = std::numeric_limits<int>::max();
  std::vector<int> starts() const;  // first operator of each stage, then the operator count
};

// Costs a given partition (stage starts, then the operator count): with memory optimization (each
// stage's decisions chosen for the partition's own period) or keeping everything.
PartitionResult evaluate_partition(const PartitionProblem& problem, const std::vector<int>& starts,
                                   bool optimize_memory);

PartitionResult partition_model(const PartitionProblem& problem, PartitionMethod method);

// The largest integer micro-batch size (up to `limit`) at which `method` finds a partition that
// fits; 0 when not even 1 does. `problem_at(b)` builds the problem at micro-batch size b.
template <class ProblemAt>
int max_microbatch_size(ProblemAt problem_at, PartitionMethod method, int limit = 1 << 16) {
  auto fits = [&](int b) {
    PartitionProblem problem = problem_at(b);
    problem.measure_shortfall = false;  // only whether it fits
    return partition_model(problem, method).fits;
  };
  if (!fits(1)) return 0;
  int good = 1, bad = 2;
  while (bad <= limit && fits(bad)) good = bad, bad *= 2;
  if (bad > limit) bad = limit + 1;
  while (bad - good > 1) {
    const int mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good;
}

// The largest b below `failing` (a size known to fail) for which `passes(b)`; 0 when none does.
// The simulation check is not monotone in b: the budget-lowering rounds converge at some sizes
// and not at smaller ones. So the search gallops down from the top (failing - 1, - 2, - 4, ... times
// a step of failing / 128) to the first size that passes, then bisects between it and the failing
// size just above. A plain bisection from 0 can settle far below a passing size near the top.
template <class Passes>
int largest_passing_below(int failing, Passes passes) {
  const int step = std::max(1, failing / 128);
  int fails = failing, found = 0;
  for (int down = step;; down *= 2) {
    const int b = std::max(failing - down, 0);
    if (b == 0) break;
    if (passes(b)) {
      found = b;
      break;
    }
    fails = b;
  }
  if (found == 0) return 0;
  while (fails - found > 1) {
    const int mid = found + (fails - found) / 2;
    (passes(mid) ? found : fails) = mid;
  }
  return found;
}

}  // namespace flexpipe
