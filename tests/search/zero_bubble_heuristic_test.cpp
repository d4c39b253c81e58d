// Zero Bubble's greedy heuristic: the generator against an implementation of the authors'
// `manual_order` written here apart from it (node ids, per-stage counters, as in auto_schedule.py),
// hand-computed makespans, and the search from a cost table, which must never be slower than the best
// of the heuristic's eight variants at any number of micro-batches.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/search/search.h"
#include "flexpipe/search/zero_bubble_heuristic.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe {
namespace {

// The authors' heuristic as they wrote it: nodes F, B, W of (stage, micro-batch) numbered
// type * S * M + stage * M + mb, `t` their completion times, one communication time between
// neighbouring stages. Returns each stage's passes in order, as "F3" / "B3" / "W3", or nothing where
// the authors raise "Cannot fit memory" (or their `put` asserts).
struct Reference {
  int S, M;
  std::vector<double> cost_f, cost_b, cost_w, mem_f, mem_b, mem_w, max_mem;
  double comm;

  std::optional<std::vector<std::vector<std::string>>> manual_order(bool allow_bubble_before_first_b, bool prioritize_b,
                                                                    bool no_bubble_greedy) const {
    std::vector<int> f(S, 0), b(S, 0), w(S, 0);
    std::vector<double> e(S, 0), m(S, 0), stage_bubble(S, 0), t(3 * S * M, 0);
    std::vector<std::vector<std::string>> order(S);
    bool broken = false;
    auto id = [&](int type, int stage, int mb) { return type * (S * M) + stage * M + mb; };
    auto cost = [&](int type, int stage) {
      return type == 0 ? cost_f[stage] : type == 1 ? cost_b[stage] : cost_w[stage];
    };
    auto mem = [&](int type, int stage) { return type == 0 ? mem_f[stage] : type == 1 ? mem_b[stage] : mem_w[stage]; };
    auto max_bubble = [&] { return *std::max_element(stage_bubble.begin(), stage_bubble.end()); };
    auto put = [&](int j, int k) {
      int& count = k == 0 ? f[j] : k == 1 ? b[j] : w[j];
      const int i = count;
      // Over the limit (the authors assert), or a backward whose forward never ran (with m < p their
      // warm-up can leave a stage ahead of the one before it; they would not notice).
      if (m[j] + mem(k, j) > max_mem[j] || (k == 1 && f[j] <= i)) {
        broken = true;
        return;
      }
      double tmp = e[j] + cost(k, j);
      const double no_bubble = tmp;
      if (j > 0 && k == 0) tmp = std::max(tmp, t[id(0, j - 1, i)] + comm + cost(k, j));
      if (j < S - 1 && k == 1) tmp = std::max(tmp, t[id(1, j + 1, i)] + comm + cost(k, j));
      if (f[j] > 0) stage_bubble[j] += tmp - no_bubble;
      e[j] = tmp;
      t[id(k, j, i)] = tmp;
      m[j] += mem(k, j);
      ++count;
      order[j].push_back(std::string("FBW").substr(k, 1) + std::to_string(i));
    };
    for (int i = 0; i < M && !broken; ++i) {
      if (i == 0) {
        for (int j = 0; j < S; ++j) put(j, 0);
        std::vector<int> f_required(S, 0);
        double last_t = 0;
        for (int j = S - 1; j >= 0; --j) {
          if (j == S - 1) {
            last_t = t[id(0, j, i)] + cost(1, j);
            continue;
          }
          double memory = m[j], time = e[j];
          while (f[j] + f_required[j] < M && memory + mem(0, j) <= max_mem[j]) {
            if (allow_bubble_before_first_b ? time + cost(0, j) > last_t + comm : time >= last_t + comm) break;
            memory += mem(0, j);
            time += cost(0, j);
            ++f_required[j];
          }
          last_t = std::max(time, last_t + comm) + cost(1, j);
        }
        for (int j = 0; j < S; ++j)
          while (j > 0 && f_required[j] > 0 && f_required[j] >= f_required[j - 1] && f[j] + f_required[j] < M)
            --f_required[j];
        for (int j = 0; j < S; ++j)
          for (int n = 0; n < f_required[j]; ++n) put(j, 0);
        for (int j = S - 1; j >= 0; --j) put(j, 1);
        continue;
      }
      std::vector<int> f_required(S, 0);
      for (int j = 0; j < S; ++j) {
        if (f[j] >= M) continue;
        if (j + 1 < S && f[j] >= f[j + 1] + 2 && prioritize_b) {
          const double next_plus_fw = e[j + 1] + cost(0, j + 1) + cost(1, j + 1) + comm;
          if (e[j] >= next_plus_fw) continue;
          double w_cost = 0, mem_with_w = m[j] + mem(0, j);
          for (int w_cnt = 0; mem_with_w > max_mem[j] && w[j] + w_cnt < b[j]; ++w_cnt) {
            w_cost += cost(2, j);
            mem_with_w += mem(2, j);
          }
          if (e[j] + cost(0, j) + w_cost <= next_plus_fw) {
            f_required[j] = 1;
            continue;
          }
          if (next_plus_fw - e[j] <= max_bubble() - stage_bubble[j]) continue;
        }
        f_required[j] = 1;
      }
      for (int j = S - 2; j >= 0; --j) f_required[j] = std::min(f_required[j], f_required[j + 1]);
      // W's before a forward or a backward: for memory, then to fill the wait for its input.
      auto fill = [&](int j, double input) {
        while (w[j] < b[j] && e[j] + cost(2, j) <= input) put(j, 2);
        if (w[j] < b[j] && e[j] < input) {
          if (input - e[j] <= max_bubble() - stage_bubble[j]) {
            if (no_bubble_greedy) put(j, 2);
          } else {
            put(j, 2);
          }
        }
      };
      for (int j = 0; j < S && !broken; ++j) {
        if (f_required[j] == 0) continue;
        while (m[j] + mem(0, j) > max_mem[j]) {
          if (w[j] >= b[j]) return std::nullopt;
          put(j, 2);
        }
        if (j > 0) fill(j, t[id(0, j - 1, f[j])] + comm);
        put(j, 0);
      }
      for (int j = S - 1; j >= 0 && !broken; --j) {
        while (m[j] + mem(1, j) > max_mem[j]) {
          if (w[j] >= b[j]) return std::nullopt;
          put(j, 2);
        }
        if (j + 1 < S) fill(j, t[id(1, j + 1, i)] + comm);
        if (j == 0 && f[j] == M)
          while (w[j] < b[j]) put(j, 2);
        put(j, 1);
      }
    }
    for (int j = 0; j < S; ++j) {
      if (f[j] < M) return std::nullopt;
      while (w[j] < M) put(j, 2);
    }
    if (broken) return std::nullopt;
    return order;
  }
};

// Stages with their own F, I, W and activations; one latency for every transfer.
CostTable heterogeneous(int p, uint32_t seed, double comm) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> spread(0.7, 1.3);
  CostTable costs = uniform_costs(p, 1, 1, 1, comm);
  for (StageCosts& s : costs.stages) {
    s.forward = spread(random);
    s.backward_input = 1.1 * s.forward * spread(random);
    s.backward_weight = 0.7 * s.forward * spread(random);
    s.backward = s.backward_input + s.backward_weight;
    s.recompute = s.forward;
    s.activation_bytes = spread(random);
    s.freed_by_input = 0.5 * s.activation_bytes;
  }
  return costs;
}

Reference reference_of(const CostTable& costs, int m) {
  Reference r{static_cast<int>(costs.stages.size()), m, {}, {}, {}, {}, {}, {}, {}, costs.link.latency};
  for (size_t d = 0; d < costs.stages.size(); ++d) {
    const StageCosts& s = costs.stages[d];
    r.cost_f.push_back(s.forward);
    r.cost_b.push_back(s.backward_input);
    r.cost_w.push_back(s.backward_weight);
    r.mem_f.push_back(s.activation_bytes);
    r.mem_b.push_back(-s.freed_by_input);
    r.mem_w.push_back(-(s.activation_bytes - s.freed_by_input));
    r.max_mem.push_back(costs.capacity(static_cast<int>(d)));
  }
  return r;
}

Schedule skeleton(int p, int m) { return make_schedule("zb", p, m, loop_placement(p, p)); }

std::vector<std::vector<std::string>> passes_of(const Schedule& s) {
  std::vector<std::vector<std::string>> out;
  for (const auto& list : s.device_actions) {
    out.emplace_back();
    for (const Action& a : list)
      out.back().push_back(fmt::format("{}{}",
                                       a.kind == ActionKind::F   ? 'F'
                                       : a.kind == ActionKind::I ? 'B'
                                                                 : 'W',
                                       a.microbatch));
  }
  return out;
}

// The simulated makespan of the best variant of the reference, among those that fit; and which.
struct HeuristicBest {
  double makespan = kInfinity;
  int variant = -1;
};

HeuristicBest heuristic_best(const CostTable& costs, int m) {
  const int p = static_cast<int>(costs.stages.size());
  const Reference reference = reference_of(costs, m);
  HeuristicBest best;
  int index = 0;
  for (bool bubble : {true, false})
    for (bool prioritize : {true, false})
      for (bool greedy : {true, false}) {
        const auto order = reference.manual_order(bubble, prioritize, greedy);
        ++index;
        if (!order) continue;
        Schedule s = skeleton(p, m);
        for (int d = 0; d < p; ++d)
          for (const std::string& pass : (*order)[d]) {
            const ActionKind kind = pass[0] == 'F' ? ActionKind::F : pass[0] == 'B' ? ActionKind::I : ActionKind::W;
            s.device_actions[d].push_back(Action::make(kind, d, std::stoi(pass.substr(1))));
          }
        const SimResult sim = simulate(lower(s), costs);
        if (sim.fits && sim.makespan < best.makespan) best = {sim.makespan, index - 1};
      }
  return best;
}

// The generator writes the authors' orders: every variant, heterogeneous stages, limits from tight
// (room for little more than one micro-batch on the first device) to none.
TEST(ZeroBubbleHeuristic, WritesTheAuthorsOrders) {
  int compared = 0, impossible = 0;
  for (uint32_t seed = 1; seed <= 6; ++seed)
    for (int p : {1, 2, 4, 5})
      for (int m : {1, 3, 8, 13})
        for (double limit : {1.6, 2.5, 4.0, 7.0, kInfinity}) {
          CostTable costs = heterogeneous(p, seed * 131 + p * 7 + m, 0.05 * seed);
          costs.memory_capacity = {limit * 1.3};
          const Reference reference = reference_of(costs, m);
          for (int v = 0; v < 8; ++v) {
            const ZeroBubbleVariant variant = zero_bubble_variants()[v];
            const auto expected = reference.manual_order(variant.bubble_before_first_backward, variant.backward_first,
                                                         variant.fill_short_waits);
            const std::optional<Schedule> generated = zero_bubble_order(skeleton(p, m), costs, variant);
            ASSERT_EQ(generated.has_value(), expected.has_value()) << "seed " << seed << " p " << p << " m " << m;
            if (!generated) {
              ++impossible;
              continue;
            }
            ++compared;
            ASSERT_EQ(passes_of(*generated), *expected)
                << "seed " << seed << " p " << p << " m " << m << " variant " << v;
            const auto problems = validate(*generated);
            ASSERT_TRUE(problems.empty()) << problems.front().to_string() << " p " << p << " m " << m;
            EXPECT_TRUE(simulate(lower(*generated), costs).fits);
          }
        }
  EXPECT_GT(compared, 2000);
  EXPECT_GT(impossible, 0);  // the tightest limits leave some variants no room
}

// The eight variants in the authors' order: allow_bubble_before_first_b, prioritize_b and
// no_bubble_greedy, each true before false.
TEST(ZeroBubbleHeuristic, VariantsComeInTheAuthorsOrder) {
  const auto variants = zero_bubble_variants();
  EXPECT_EQ(variants[0], (ZeroBubbleVariant{true, true, true}));
  EXPECT_EQ(variants[1], (ZeroBubbleVariant{true, true, false}));
  EXPECT_EQ(variants[2], (ZeroBubbleVariant{true, false, true}));
  EXPECT_EQ(variants[7], (ZeroBubbleVariant{false, false, false}));
}

// Hand-computed: equal stages F = I = W = 1 with no transfer time and room for p micro-batches on
// every device (ZB-H1's memory). Every device fills the drain with its deferred W's, so the step is
// ZB-H1's, 3m + p - 1 (1F1B's would be (m + p - 1) 3 = 33 at p = 4, m = 8).
TEST(ZeroBubbleHeuristic, UniformStagesAtZbH1MemoryTakeZbH1Time) {
  const int p = 4, m = 8;
  CostTable costs = uniform_costs(p, 1, 1, 1);
  costs.memory_capacity = {double(p)};
  double best = kInfinity;
  for (const ZeroBubbleVariant& v : zero_bubble_variants())
    if (const auto s = zero_bubble_order(skeleton(p, m), costs, v))
      best = std::min(best, simulate(lower(*s), costs).makespan);
  EXPECT_DOUBLE_EQ(best, 3 * m + p - 1);
}

// One micro-batch of room on a device that needs two before its first backward: no variant fits,
// as the authors' heuristic raises "Cannot fit memory"; a one-stage pipeline always fits one.
TEST(ZeroBubbleHeuristic, NoOrderWhereNoForwardFits) {
  CostTable costs = uniform_costs(2, 1, 1, 1);
  costs.memory_capacity = {0.5};
  for (const ZeroBubbleVariant& v : zero_bubble_variants()) EXPECT_FALSE(zero_bubble_order(skeleton(2, 4), costs, v));
  costs = uniform_costs(1, 1, 1, 1);
  costs.memory_capacity = {1};
  const auto single = zero_bubble_order(skeleton(1, 3), costs, zero_bubble_variants()[0]);
  ASSERT_TRUE(single);
  EXPECT_DOUBLE_EQ(simulate(lower(*single), costs).makespan, 9);
}

// The search from a cost table of one stage per device, heterogeneous F, I, W, a tight limit (about
// ZB-H1's p micro-batches) and the problem the heuristic solves (one stage per device, nothing
// recomputed or offloaded): never slower than the best of the heuristic's eight variants, at m
// beyond branch and bound's reach too.
// (Without the heuristic's candidates the search was 0.5% slower than it at p = 8, m = 32, seed 11.)
TEST(ZeroBubbleHeuristic, TheSearchIsNeverSlowerThanTheHeuristic) {
  int compared = 0;
  for (int p : {4, 8})
    for (int m : {8, 16, 32})
      for (uint32_t seed : {11u, 12u, 13u}) {
        CostTable costs = heterogeneous(p, seed * 1000 + m, 0.05);
        costs.memory_capacity = {p * 1.1};
        const HeuristicBest heuristic = heuristic_best(costs, m);
        if (heuristic.makespan == kInfinity) continue;  // no variant fits (p = 8, m = 8: two of three)
        ++compared;
        SearchProblem problem;
        problem.stage_costs = StageCostProblem{"table", costs, std::vector<char>(p, 0), false};
        problem.devices = p;
        problem.batches = {{m, 1}};
        problem.max_chunks = 1;
        problem.v_shape = false;
        problem.bidirectional = false;
        problem.memory_choices = false;
        SearchOptions options;
        options.time_budget = kInfinity;  // ends on its own: `exhausted` does not depend on speed
        options.threads = 1;
        const SearchResult result = search_schedules(problem, options);
        ASSERT_TRUE(result.found);
        EXPECT_TRUE(result.exhausted);
        EXPECT_LE(result.best.makespan, heuristic.makespan) << "seed " << seed << " m " << m;
        EXPECT_TRUE(simulate(lower(result.best.schedule), result.best.costs).fits);
      }
  EXPECT_GE(compared, 16);
}

}  // namespace
}  // namespace flexpipe
