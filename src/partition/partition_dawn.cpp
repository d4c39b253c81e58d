// DawnPiper's binary partitioning (docs/partitioner.md): for a target period T, greedies give each
// stage the longest range it can afford, a search over every reachable cut settles what they cannot,
// and a bisection on T finds the least bottleneck.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "stage_cost.h"

namespace flexpipe::partition {

namespace {

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

}  // namespace

PartitionResult binary_partition(const PartitionProblem& problem) { return BinaryPartitioner(problem).run(); }

}  // namespace flexpipe::partition
