// DawnPiper-style binary partitioning (docs/partitioner.md). The stage cost c_s(i, j; T) is the
// compute of operators [i, j) plus the least time its memory decisions add to fit stage s's budget
// when the pipeline's period is T (infinite when nothing fits). It is interval-monotone (a sub-range
// never costs more), so for a target T the greedy that gives each stage, in order, the longest range
// it can afford decides feasibility exactly, and a bisection on T finds the optimal bottleneck.
#include "flexpipe/partition/partitioner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

const char* partition_method_name(PartitionMethod method) {
  switch (method) {
    case PartitionMethod::Dawn: return "dawn";
    case PartitionMethod::Uniform: return "uniform";
    case PartitionMethod::Params: return "params";
    case PartitionMethod::PipeDream: return "pipedream";
    case PartitionMethod::VPipe: return "vpipe";
    case PartitionMethod::Exhaustive: return "exhaustive";
  }
  return "dawn";
}

PartitionMethod parse_partition_method(const std::string& name) {
  for (PartitionMethod m : {PartitionMethod::Dawn, PartitionMethod::Uniform, PartitionMethod::Params,
                            PartitionMethod::PipeDream, PartitionMethod::VPipe, PartitionMethod::Exhaustive})
    if (name == partition_method_name(m)) return m;
  throw Error(
      fmt::format("unknown partition method '{}'; known: dawn, uniform, params, pipedream, vpipe, exhaustive", name));
}

std::vector<int> PartitionResult::starts() const {
  std::vector<int> result;
  for (const StageResult& stage : stages) result.push_back(stage.begin);
  if (!stages.empty()) result.push_back(stages.back().end);
  return result;
}

PartitionProblem make_partition_problem(const CostGraph& graph, const Shape& shape, const Schedule& schedule,
                                        double memory_limit, double host_bandwidth, double bytes_per_parameter) {
  if (graph.nodes.empty()) throw Error(fmt::format("the graph '{}' has no operators", graph.name));
  if (!(memory_limit > 0)) throw Error(fmt::format("the memory limit must be positive, got {}", memory_limit));
  const int stages = schedule.stages_per_pipeline;
  if (stages > static_cast<int>(graph.nodes.size()))
    throw Error(fmt::format("{} stages for the {} operators of '{}': every stage needs at least one", stages,
                            graph.nodes.size(), graph.name));
  PartitionProblem problem;
  problem.ops = make_operator_table(graph, shape);
  problem.in_flight = in_flight_per_chunk(schedule);
  const std::vector<int> sharing = chunks_sharing_device(schedule);
  for (int c = 0; c < stages; ++c) problem.budget.push_back(memory_limit / sharing[c]);
  problem.host_bandwidth = host_bandwidth;
  problem.bytes_per_parameter = bytes_per_parameter;
  const std::vector<char> split_stages = split_backward_stages(schedule);
  problem.split_backward = std::find(split_stages.begin(), split_stages.end(), 1) != split_stages.end();
  // Bytes crossing each cut: per producer, the smaller of its output and its edges to later operators.
  const int n = static_cast<int>(graph.nodes.size());
  std::vector<double> crossing(n + 1, 0);
  std::vector<std::vector<std::pair<int, double>>> consumers(n);
  for (const TensorEdge& edge : graph.edges)
    consumers[edge.from].emplace_back(edge.to, edge.bytes.at(shape.microbatch_size, shape.seq_len));
  for (int v = 0; v < n; ++v) {
    const double output = graph.nodes[v].output_bytes.at(shape.microbatch_size, shape.seq_len);
    for (int j = v + 1; j < n; ++j) {
      double later = 0;
      for (const auto& [to, bytes] : consumers[v])
        if (to >= j) later += bytes;
      if (later == 0) break;
      crossing[j] += std::min(output, later);
    }
  }
  // The typical cheap cut: the first quartile of the crossings (heads and poolers near the end can
  // cross far less than any cut between layers, so not the minimum).
  problem.cut_allowed.assign(n + 1, 1);
  if (n > 2) {
    std::vector<double> sorted(crossing.begin() + 1, crossing.begin() + n);
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 4, sorted.end());
    const double cheap = sorted[sorted.size() / 4];
    int allowed = 0;
    for (int j = 1; j < n; ++j) allowed += problem.cut_allowed[j] = crossing[j] <= 2 * cheap * (1 + 1e-9);
    if (allowed < stages - 1) problem.cut_allowed.assign(n + 1, 1);
  }
  int previous_layer = -2;
  for (size_t v = 0; v < graph.nodes.size(); ++v) {
    const int layer = graph.nodes[v].layer;
    if (v == 0 || layer == kNoLayer || layer != previous_layer) problem.layer_starts.push_back(static_cast<int>(v));
    previous_layer = layer;
  }
  return problem;
}

namespace {

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

void check_problem(const PartitionProblem& problem) {
  const int n = problem.ops.size(), stages = problem.num_stages();
  if (stages <= 0) throw Error("a partition needs at least one stage");
  if (static_cast<int>(problem.budget.size()) != stages)
    throw Error(fmt::format("{} memory budgets for {} stages", problem.budget.size(), stages));
  if (stages > n) throw Error(fmt::format("{} stages for {} operators: every stage needs at least one", stages, n));
  if (!problem.cut_allowed.empty() && static_cast<int>(problem.cut_allowed.size()) != n + 1)
    throw Error(
        fmt::format("{} cut flags for {} operators (one per cut position 0..{})", problem.cut_allowed.size(), n, n));
  for (int k : problem.in_flight)
    if (k < 1) throw Error(fmt::format("in-flight count {} (a stage holds at least one micro-batch)", k));
}

// Every stage's decisions for the partition's own period and the bottleneck. The period is the least
// T with max_s c_s(T) <= T (c_s falls as T grows: the transfers have longer to hide in).
PartitionResult finish(const PartitionProblem& problem, StageCost& cost, const std::vector<int>& starts, bool optimize,
                       PartitionMethod method) {
  const int stages = problem.num_stages();
  PartitionResult result;
  result.method = method;
  auto build = [&](double period) {
    std::vector<StageResult> out;
    for (int s = 0; s < stages; ++s) out.push_back(cost.stage(s, starts[s], starts[s + 1], period, optimize));
    return out;
  };
  auto worst = [](const std::vector<StageResult>& out) {
    double t = 0;
    for (const StageResult& r : out) t = std::max(t, r.memory.fits ? r.time : kInfinity);
    return t;
  };
  cost.enter("stage decisions");
  std::vector<StageResult> at_infinity = build(kInfinity);
  double lo = worst(at_infinity);
  if (lo == kInfinity) {
    result.stages = std::move(at_infinity);
    for (const StageResult& r : result.stages)
      if (!r.memory.fits)
        result.shortfall = std::max(result.shortfall, r.memory.memory - problem.budget[&r - &result.stages[0]]);
    result.fits = false;
    return result;
  }
  double hi = std::max(lo, 1e-300);
  std::vector<StageResult> best = build(hi);
  while (worst(best) > hi) {
    hi *= 2;
    best = build(hi);
  }
  for (int iteration = 0; iteration < 60 && hi - lo > 1e-12 * hi; ++iteration) {
    if (cost.stopped()) break;  // anytime: `best` holds at `hi`
    cost.enter("stage decisions", iteration, hi);
    const double mid = 0.5 * (lo + hi);
    std::vector<StageResult> trial = build(mid);
    if (worst(trial) <= mid)
      hi = mid, best = std::move(trial);
    else
      lo = mid;
  }
  result.stages = std::move(best);
  result.bottleneck = worst(result.stages);
  result.fits = true;
  return result;
}

// ---- Dawn ----

// Stage evaluations the search over every reachable cut may add to the bisection besides as many as
// the greedies took (BinaryPartitioner::run).
constexpr int64_t kReachEvaluations = 5000;

class BinaryPartitioner {
 public:
  explicit BinaryPartitioner(const PartitionProblem& problem) : p_(problem), cost_(problem) {
    const int n = cost_.size();
    allowed_at_or_before_.assign(n + 1, 0);
    for (int j = 0, last = 0; j <= n; ++j) {
      if (problem.cut_allowed.empty() || problem.cut_allowed[j]) last = j;
      allowed_at_or_before_[j] = last;
    }
    allowed_at_or_after_.assign(n + 1, n);
    for (int j = n, next = n; j >= 0; --j) {
      if (problem.cut_allowed.empty() || problem.cut_allowed[j]) next = j;
      allowed_at_or_after_[j] = next;
    }
    for (int j = 1; j < n; ++j)
      if (problem.cut_allowed.empty() || problem.cut_allowed[j]) interior_cuts_.push_back(j);
  }

  PartitionResult run() {
    const int n = cost_.size(), stages = p_.num_stages();
    std::vector<int> starts;
    cost_.enter("a partition that fits");
    if (!feasible_exactly(kInfinity, starts)) {
      if (p_.measure_shortfall) return cannot_fit();
      PartitionResult result;
      result.method = PartitionMethod::Dawn;
      result.evaluations = cost_.evaluations();
      result.smallest_optimized = cost_.smallest_optimized();
      return result;
    }
    const double least = std::max(cost_.compute(0, n) / stages, [&] {
      double largest = 0;
      for (int v = 0; v < n; ++v) largest = std::max(largest, cost_.compute(v, v + 1));
      return largest;
    }());
    double lo = least;
    double hi = std::max(lo, 1e-300);
    std::vector<int> best;
    // Feasible at an infinite period means feasible at a finite one (transfers hide in long periods);
    // the cap only guards against a solver that cannot see it.
    int doublings = 0;
    cost_.enter("a period that fits");
    while (!feasible_exactly(hi, best)) {
      if (++doublings > 200) throw Error("the partitioner found no finite period for a partition that fits");
      hi *= 2;
      cost_.enter("a period that fits", doublings);
    }
    // Bisection with the greedies, then, where the search over every reachable cut meets the period
    // the greedies could not, on with it: the greedies miss a partition only where a stage's cost
    // is not monotone in its start (docs/partitioner.md), and the search costs a check per reachable
    // start. It continues within a budget: as many stage evaluations again as the greedies took, and
    // kReachEvaluations more (exact on small graphs; on large ones the best period found by then).
    auto bisect = [&](bool exactly, int64_t budget) {
      for (int iteration = 0; iteration < 60 && hi - lo > 1e-12 * hi; ++iteration) {
        if (cost_.stopped()) return;  // anytime: `best` is feasible at `hi`
        if (cost_.evaluations() > budget) return;
        cost_.enter(exactly ? "bisection over every reachable cut" : "bisection", iteration, hi);
        const double mid = 0.5 * (lo + hi);
        if (exactly ? feasible_exactly(mid, starts) : feasible(mid, starts))
          hi = mid, best = starts;
        else
          lo = mid;
      }
    };
    bisect(false, std::numeric_limits<int64_t>::max());
    const int64_t budget = 2 * cost_.evaluations() + kReachEvaluations;
    if (lo < hi && !cost_.stopped()) {
      cost_.enter("every reachable cut", 0, hi);
      if (feasible_by_reach(lo, starts)) {
        hi = lo, best = starts, lo = least;
        bisect(true, budget);
      }
    }
    PartitionResult result;
    result.method = PartitionMethod::Dawn;
    cost_.enter("stage decisions", 0, hi);
    for (int s = 0; s < stages; ++s) result.stages.push_back(cost_.stage(s, best[s], best[s + 1], hi, true));
    result.bottleneck = 0;
    for (const StageResult& r : result.stages) result.bottleneck = std::max(result.bottleneck, r.time);
    result.fits = true;
    result.evaluations = cost_.evaluations();
    result.smallest_optimized = cost_.smallest_optimized();
    return result;
  }

 private:
  // Whether some partition meets period T: the greedy from the first stage, else the one from the
  // last. Each stage must take at least one operator, so a short rest can leave a later stage only
  // operators it cannot hold (the head on a stage that holds k > 1 micro-batches) where taking less
  // before would have worked; the greedy from the other end then finds it.
  bool feasible(double T, std::vector<int>& starts) {
    return feasible_from_the_first(T, starts) || feasible_from_the_last(T, starts);
  }
  bool feasible_exactly(double T, std::vector<int>& starts) {
    return feasible(T, starts) || feasible_by_reach(T, starts);
  }

  // Every cut each stage can reach: exact whenever a stage's cost grows with its right end, without
  // the greedies' need for it to fall as its left end moves right. On a DAG it need not: a stage
  // that starts after an operator receives its output and holds it (or checkpoints it) until the
  // backward, where a stage that starts at the operator sends it on. The reachable starts of stage
  // s + 1 are the ends of affordable ranges from the reachable starts of stage s; a range from start
  // i is affordable up to some end A(i) and no further, so one check per start says whether it
  // reaches past the cuts reached so far, and a bisection how far.
  bool feasible_by_reach(double T, std::vector<int>& starts) {
    const int n = cost_.size(), stages = p_.num_stages();
    const std::vector<double>& prefix = cost_.compute_prefix();
    // from[s][j]: the start of stage s - 1 whose range ends at cut j; -1 where no stage s starts.
    std::vector<std::vector<int>> from(stages, std::vector<int>(n + 1, -1));
    std::vector<int> current{0};
    for (int s = 0; s < stages; ++s) {
      if (p_.should_stop && p_.should_stop()) return false;
      // Most ranges this search tries cannot fit at all: the least-memory program says so first.
      auto affordable = [&](int begin, int end) {
        if (cost_.compute(begin, end) > T || (T < kInfinity && !cost_.can_fit(s, begin, end))) return false;
        const double c = cost_.cost(s, begin, end, T, T);
        return c < kInfinity && c <= T;
      };
      if (s == stages - 1) {
        for (auto it = current.rbegin(); it != current.rend(); ++it) {
          if (!affordable(*it, n)) continue;
          starts.assign(stages + 1, n);
          for (int t = s, j = *it; t > 0; --t) starts[t] = j, j = from[t][j];
          starts[0] = 0;
          return true;
        }
        return false;
      }
      const int later = stages - 1 - s;
      const int spare = static_cast<int>(interior_cuts_.size()) - later;
      if (spare < 0) return false;
      // The stages after this one carry the rest at T each: compute(j, n) <= later * T.
      const double need = prefix[n] - later * T;
      const int lo_cut =
          static_cast<int>(std::lower_bound(prefix.begin(), prefix.end(), need * (1 - 1e-15)) - prefix.begin());
      std::vector<int> next;
      int reached = 0;  // the last cut reached so far; the starts come in ascending order, and so do their first ends
      for (int i : current) {
        // Longest by compute alone, and leaving an allowed cut for each later boundary.
        int hi = std::min(interior_cuts_[spare], static_cast<int>(std::upper_bound(prefix.begin() + i, prefix.end(),
                                                                                   (prefix[i] + T) * (1 + 1e-15)) -
                                                                  prefix.begin()) -
                                                     1);
        hi = allowed_at_or_before_[hi];
        const int first_new = allowed_at_or_after_[std::max({i + 1, lo_cut, reached + 1})];
        if (first_new > hi || !affordable(i, first_new)) continue;
        int good = first_new, bad = hi + 1;
        if (affordable(i, hi))
          good = hi;
        else
          bad = hi;
        while (bad - good > 1) {
          const int mid = good + (bad - good) / 2;
          (affordable(i, mid) ? good : bad) = mid;
        }
        good = allowed_at_or_before_[good];
        for (int j = first_new; j <= good; ++j)
          if (p_.cut_allowed.empty() || p_.cut_allowed[j]) {
            from[s + 1][j] = i;
            next.push_back(j);
          }
        reached = good;
      }
      if (next.empty()) return false;
      current = std::move(next);
    }
    return false;
  }

  // Greedy: each stage in turn takes the longest range it can afford at period T, leaving one
  // operator per later stage. The compute bounds bracket each cut before any memory optimization:
  // a stage cannot compute longer than T, and the stages after it cannot take more than their T each.
  bool feasible_from_the_first(double T, std::vector<int>& starts) {
    const int n = cost_.size(), stages = p_.num_stages();
    const std::vector<double>& prefix = cost_.compute_prefix();
    starts.assign(1, 0);
    int start = 0;
    for (int s = 0; s < stages; ++s) {
      // Infinite cost means the range cannot fit at all, even when T is infinite.
      auto affordable = [&](int end) {
        const double c = cost_.cost(s, start, end, T, T);
        return c < kInfinity && c <= T;
      };
      if (s == stages - 1) {
        if (!affordable(n)) return false;
        starts.push_back(n);
        return true;
      }
      const int later = stages - 1 - s;
      // Leave an allowed cut for each boundary after this one.
      const int spare = static_cast<int>(interior_cuts_.size()) - later;
      if (spare < 0) return false;
      int hi = interior_cuts_[spare];
      // Longest by compute alone: compute(start, j) <= T.
      const double reach = prefix[start] + T;
      hi = std::min(hi, static_cast<int>(std::upper_bound(prefix.begin() + start, prefix.end(), reach * (1 + 1e-15)) -
                                         prefix.begin()) -
                            1);
      // Shortest the later stages allow: compute(j, n) <= later * T.
      const double need = prefix[n] - later * T;
      const int lo_cut =
          std::max(start + 1, static_cast<int>(std::lower_bound(prefix.begin(), prefix.end(), need * (1 - 1e-15)) -
                                               prefix.begin()));
      if (hi < lo_cut) return false;
      if (!affordable(start + 1)) return false;
      int good = start + 1, bad = hi + 1;
      if (affordable(hi))
        good = hi;
      else
        bad = hi;
      while (bad - good > 1) {
        const int mid = good + (bad - good) / 2;
        (affordable(mid) ? good : bad) = mid;
      }
      // Cuts that may not be taken: the longest affordable range ends at the last allowed one (a shorter
      // range is affordable too, by interval monotonicity).
      good = allowed_at_or_before_[good];
      if (good <= start || good < lo_cut) return false;
      starts.push_back(good);
      start = good;
    }
    return true;
  }

  // The mirror image: from the last stage back, each takes the longest range ending where the next
  // one starts that it can afford, leaving one operator per earlier stage.
  bool feasible_from_the_last(double T, std::vector<int>& starts) {
    const int n = cost_.size(), stages = p_.num_stages();
    const std::vector<double>& prefix = cost_.compute_prefix();
    std::vector<int> ends(1, n);
    int end = n;
    for (int s = stages - 1; s >= 0; --s) {
      auto affordable = [&](int begin) {
        const double c = cost_.cost(s, begin, end, T, T);
        return c < kInfinity && c <= T;
      };
      if (s == 0) {
        if (!affordable(0)) return false;
        ends.push_back(0);
        break;
      }
      // Leave an allowed cut for each boundary before this one.
      if (static_cast<int>(interior_cuts_.size()) < s) return false;
      int lo = interior_cuts_[s - 1];
      // Longest by compute alone: compute(j, end) <= T; the earlier stages take compute(0, j) <= s * T.
      lo = std::max(lo, static_cast<int>(std::lower_bound(prefix.begin(), prefix.begin() + end + 1,
                                                          (prefix[end] - T) * (1 - 1e-15)) -
                                         prefix.begin()));
      const double room = s * T;
      const int room_cut =
          static_cast<int>(std::upper_bound(prefix.begin(), prefix.end(), room * (1 + 1e-15)) - prefix.begin()) - 1;
      const int hi_cut = std::min(end - 1, room_cut);
      if (hi_cut < lo) return false;
      if (!affordable(end - 1)) return false;
      int good = end - 1, bad = lo - 1;
      if (affordable(lo))
        good = lo;
      else
        bad = lo;
      while (good - bad > 1) {
        const int mid = bad + (good - bad) / 2;
        (affordable(mid) ? good : bad) = mid;
      }
      // The longest affordable range starts at the first allowed cut at or after `good`.
      good = allowed_at_or_after_[good];
      if (good >= end || good > hi_cut) return false;
      ends.push_back(good);
      end = good;
    }
    starts.assign(ends.rbegin(), ends.rend());
    return true;
  }

  // Nothing fits: the least extra memory per device with which the greedies find a partition. The
  // search over every reachable cut might need less, but it is too slow to repeat at every step of
  // this bisection on large graphs: the shortfall is an upper bound where a stage's cost is not
  // monotone in its start.
  PartitionResult cannot_fit() {
    PartitionResult result;
    result.method = PartitionMethod::Dawn;
    // Everything kept on one stage with the largest in-flight count surely fits.
    double extra_lo = 0, extra_hi = 1;
    {
      int k = 1;
      for (int f : p_.in_flight) k = std::max(k, f);
      StageContext everything = cost_.context(0, kInfinity);
      everything.in_flight = k;
      const int n = cost_.size();
      extra_hi = std::max(1.0, evaluate_stage_memory(p_.ops, 0, n, everything,
                                                     std::vector<MemoryDecision>(n, MemoryDecision::Keep))
                                   .memory);
    }
    PartitionProblem relaxed = p_;
    relaxed.progress = nullptr;  // reported here, a step per trial
    int trials = 0;
    auto fits_with = [&](double extra) {
      cost_.enter("what would fit", trials++);
      for (int s = 0; s < relaxed.num_stages(); ++s) relaxed.budget[s] = p_.budget[s] + extra;
      BinaryPartitioner trial(relaxed);
      std::vector<int> starts;
      return trial.feasible(kInfinity, starts);
    };
    for (int doublings = 0; !fits_with(extra_hi); ++doublings) {
      // Unlimited memory always fits unless the allowed cuts leave too few places to cut.
      if (doublings > 64)
        throw Error(fmt::format("no partition into {} stages cuts only where cuts are allowed", p_.num_stages()));
      extra_hi *= 2;
    }
    for (int iteration = 0; iteration < 60 && extra_hi - extra_lo > 1e-6 * extra_hi; ++iteration) {
      const double mid = 0.5 * (extra_lo + extra_hi);
      (fits_with(mid) ? extra_hi : extra_lo) = mid;
    }
    result.shortfall = extra_hi;
    result.fits = false;
    result.evaluations = cost_.evaluations();
    result.smallest_optimized = cost_.smallest_optimized();
    return result;
  }

  const PartitionProblem& p_;
  StageCost cost_;
  std::vector<int> allowed_at_or_before_, allowed_at_or_after_;
  std::vector<int> interior_cuts_;  // allowed cut positions strictly between 0 and n
};

// ---- exhaustive ----

PartitionResult exhaustive(const PartitionProblem& problem) {
  const int n = problem.ops.size(), stages = problem.num_stages();
  // C(n-1, S-1) partitions, each bisected on its period: a reference for small graphs only.
  if (n > 40 || stages > 6)
    throw Error(
        fmt::format("exhaustive search is for graphs of up to 40 operators and 6 stages (this one: {} and {}); "
                    "use --method dawn",
                    n, stages));
  StageCost cost(problem);
  PartitionResult best;
  best.method = PartitionMethod::Exhaustive;
  std::vector<int> starts(stages + 1, 0);
  starts[stages] = n;
  auto visit = [&](auto&& self, int s) -> void {
    if (s == stages) {
      PartitionResult r = finish(problem, cost, starts, true, PartitionMethod::Exhaustive);
      if (r.fits && (!best.fits || r.bottleneck < best.bottleneck)) best = std::move(r);
      return;
    }
    for (int cut = starts[s - 1] + 1; cut <= n - (stages - s); ++cut) {
      if (!problem.cut_allowed.empty() && !problem.cut_allowed[cut]) continue;
      starts[s] = cut;
      self(self, s + 1);
    }
  };
  if (stages == 1) {
    best = finish(problem, cost, starts, true, PartitionMethod::Exhaustive);
  } else {
    visit(visit, 1);
  }
  best.method = PartitionMethod::Exhaustive;
  return best;
}

// ---- baselines: whole layers ----

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
PartitionResult vpipe(const PartitionProblem& problem, StageCost& cost, const std::vector<int>& starts) {
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

}  // namespace

PartitionResult evaluate_partition(const PartitionProblem& problem, const std::vector<int>& starts,
                                   bool optimize_memory) {
  check_problem(problem);
  const int stages = problem.num_stages(), n = problem.ops.size();
  if (static_cast<int>(starts.size()) != stages + 1 || starts.front() != 0 || starts.back() != n)
    throw Error(fmt::format("a partition of {} operators into {} stages needs {} boundaries from 0 to {}", n, stages,
                            stages + 1, n));
  for (int s = 0; s < stages; ++s)
    if (starts[s + 1] <= starts[s])
      throw Error(fmt::format("stage {} is empty (operators [{}, {}))", s, starts[s], starts[s + 1]));
  StageCost cost(problem);
  if (optimize_memory) return finish(problem, cost, starts, true, PartitionMethod::Dawn);
  PartitionResult result;
  result.fits = true;
  result.bottleneck = 0;
  for (int s = 0; s < stages; ++s) {
    StageResult r = cost.stage(s, starts[s], starts[s + 1], kInfinity, false);
    if (!r.memory.fits) {
      result.fits = false;
      result.shortfall = std::max(result.shortfall, r.memory.memory - problem.budget[s]);
    }
    result.bottleneck = std::max(result.bottleneck, r.time);
    result.stages.push_back(std::move(r));
  }
  if (!result.fits) result.bottleneck = kInfinity;
  return result;
}

PartitionResult partition_model(const PartitionProblem& problem, PartitionMethod method) {
  check_problem(problem);
  const int n = problem.ops.size();
  std::vector<double> compute(n);
  for (int v = 0; v < n; ++v) compute[v] = problem.ops.forward[v] + problem.ops.backward[v];
  PartitionResult result;
  switch (method) {
    case PartitionMethod::Dawn: return BinaryPartitioner(problem).run();
    case PartitionMethod::Exhaustive: return exhaustive(problem);
    case PartitionMethod::Uniform: result = evaluate_partition(problem, uniform_starts(problem), false); break;
    case PartitionMethod::Params:
      result = evaluate_partition(problem, balanced_by(problem, problem.ops.parameters), false);
      break;
    case PartitionMethod::PipeDream: result = evaluate_partition(problem, balanced_by(problem, compute), false); break;
    case PartitionMethod::VPipe: {
      StageCost cost(problem);
      result = vpipe(problem, cost, balanced_by(problem, compute));
      break;
    }
  }
  result.method = method;
  return result;
}

}  // namespace flexpipe
