// What the partitioner's methods share (private to the library): the stage cost c_s(i, j; T) over
// range sums, the problem's checks, the stage decisions at a partition's own period, and each
// method's entry point (one file each: partition_dawn.cpp, partition_exhaustive.cpp,
// partition_baselines.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "flexpipe/partition/partitioner.h"
#include "flexpipe/partition/stage_memory.h"

namespace flexpipe::partition {

// Range sums and maxima in O(1), and the memoryless fast path of the stage cost.
class StageCost {
 public:
  explicit StageCost(const PartitionProblem& problem) : p_(problem) {
    const OperatorTable& ops = p_.ops;
    const int n = ops.size();
    compute_.assign(n + 1, 0);
    saved_.assign(n + 1, 0);
    shared_.assign(n + 1, 0);
    parameters_.assign(n + 1, 0);
    for (int v = 0; v < n; ++v) {
      compute_[v + 1] = compute_[v] + ops.forward[v] + ops.backward[v];
      saved_[v + 1] = saved_[v] + ops.saved[v];
      shared_[v + 1] = shared_[v] + ops.shared_in_stage(0, v);
      parameters_[v + 1] = parameters_[v] + ops.parameters[v];
      if (ops.tied_to[v] != kNotTied) tied_.push_back(v);
    }
    // Sparse table for the largest workspace of a range.
    workspace_.push_back(ops.workspace);
    for (int width = 1; 2 * width <= n; width *= 2) {
      const std::vector<double>& last = workspace_.back();
      std::vector<double> next(n - 2 * width + 1);
      for (int v = 0; v + 2 * width <= n; ++v) next[v] = std::max(last[v], last[v + width]);
      workspace_.push_back(std::move(next));
    }
  }

  int size() const { return p_.ops.size(); }
  double compute(int i, int j) const { return compute_[j] - compute_[i]; }

  // Progress (PartitionProblem::progress): a phase's step, and a report after every evaluation.
  void enter(const char* phase, int step = 0, double period = kInfinity) {
    progress_.phase = phase;
    progress_.step = step;
    progress_.period = period;
    report();
  }
  void report() {
    if (!p_.progress) return;
    progress_.evaluations = evaluations_;
    p_.progress(progress_);
  }
  bool stopped() const { return p_.should_stop && p_.should_stop(); }
  const std::vector<double>& compute_prefix() const { return compute_; }
  int64_t evaluations() const { return evaluations_; }
  int smallest_optimized() const { return smallest_optimized_; }

  StageContext context(int s, double period) const {
    StageContext c;
    c.in_flight = p_.in_flight[s];
    c.budget = p_.budget[s];
    c.host_bandwidth = p_.host_bandwidth;
    c.period = period;
    c.bytes_per_parameter = p_.bytes_per_parameter;
    c.split_backward = p_.split_backward;
    c.should_stop = &p_.should_stop;
    return c;
  }

  double keep_all_memory(int s, int i, int j) const {
    double parameters = parameters_[j] - parameters_[i];
    for (int v : tied_)
      if (v >= i && v < j && p_.ops.tied_to[v] >= i && p_.ops.tied_to[v] < j) parameters -= p_.ops.parameters[v];
    // What i shares with i - 1 is not shared within the range.
    const double shared = j > i ? shared_[j] - shared_[i + 1] : 0;
    // Received tensors no reader's saved bytes hold (carried through, or read only by operators that
    // save nothing) are held as the stage input.
    return parameters * p_.bytes_per_parameter + max_workspace(i, j) +
           p_.in_flight[s] * (saved_[j] - saved_[i] - shared + held_input_bytes(p_.ops, i, j));
  }

  // c_s(i, j; T); kInfinity when the range cannot fit or already computes longer than `limit`.
  double cost(int s, int i, int j, double period, double limit = kInfinity) {
    const double base = compute(i, j);
    if (base > limit) return kInfinity;
    if (keep_all_memory(s, i, j) <= p_.budget[s]) return base;
    ++evaluations_;
    double result;
    // With no period to meet only fitting matters: the least-memory program answers it in one pass.
    if (period == kInfinity) {
      result = least_stage_memory(p_.ops, i, j, context(s, period)).memory <= p_.budget[s] ? base : kInfinity;
    } else {
      smallest_optimized_ = std::min(smallest_optimized_, j - i);
      const StageMemoryPlan plan = optimize_stage_memory(p_.ops, i, j, context(s, period), p_.solver);
      result = plan.fits ? base + plan.added_time() : kInfinity;
    }
    report();
    return result;
  }

  // Whether [i, j) fits stage s at all (the least-memory program, cheaper than the solvers where
  // nothing fits). c_s(i, j; T) is finite only where it does.
  bool can_fit(int s, int i, int j) {
    if (keep_all_memory(s, i, j) <= p_.budget[s]) return true;
    ++evaluations_;
    const bool fits = least_stage_memory(p_.ops, i, j, context(s, kInfinity)).memory <= p_.budget[s];
    report();
    return fits;
  }

  StageResult stage(int s, int i, int j, double period, bool optimize) const {
    StageResult r;
    r.begin = i;
    r.end = j;
    r.compute_time = compute(i, j);
    const StageContext c = context(s, period);
    if (optimize) smallest_optimized_ = std::min(smallest_optimized_, j - i);
    r.memory = optimize
                   ? optimize_stage_memory(p_.ops, i, j, c, p_.solver)
                   : evaluate_stage_memory(p_.ops, i, j, c, std::vector<MemoryDecision>(j - i, MemoryDecision::Keep));
    r.time = r.compute_time + r.memory.added_time();
    return r;
  }

 private:
  double max_workspace(int i, int j) const {
    if (j <= i) return 0;
    int level = 0;
    while ((2 << level) <= j - i) ++level;
    return std::max(workspace_[level][i], workspace_[level][j - (1 << level)]);
  }

  const PartitionProblem& p_;
  std::vector<double> compute_, saved_, shared_, parameters_;
  std::vector<std::vector<double>> workspace_;
  std::vector<int> tied_;
  int64_t evaluations_ = 0;
  mutable int smallest_optimized_ = std::numeric_limits<int>::max();
  PartitionProgress progress_;
};

// Throws Error unless the problem's stage count, budgets, cut flags and in-flight counts agree.
void check_problem(const PartitionProblem& problem);

// Every stage's decisions for the partition's own period and the bottleneck. The period is the least
// T with max_s c_s(T) <= T (c_s falls as T grows: the transfers have longer to hide in).
PartitionResult decide_stages(const PartitionProblem& problem, StageCost& cost, const std::vector<int>& starts,
                              bool optimize, PartitionMethod method);

// The methods: DawnPiper's binary partitioning, every partition of a small graph, and the baselines.
PartitionResult binary_partition(const PartitionProblem& problem);
PartitionResult exhaustive_partition(const PartitionProblem& problem);
std::vector<int> uniform_starts(const PartitionProblem& problem);
std::vector<int> balanced_by(const PartitionProblem& problem, const std::vector<double>& per_operator);
PartitionResult vpipe_partition(const PartitionProblem& problem, StageCost& cost, const std::vector<int>& starts);

}  // namespace flexpipe::partition
