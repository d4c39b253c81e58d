// Binary partitioning against exhaustive search (on chains with skips, on DAGs whose skips cross
// several cuts), the model against the aggregation on DAGs, the baselines on hand-computed cases,
// the answer when nothing fits, and the largest micro-batch on zoo models.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "dag_graphs.h"
#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/partition/partitioner.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"
#include "sanitized.h"

namespace flexpipe {
namespace {

// Under the sanitizers these searches run many times slower than in Release: the three heaviest tests
// below do less there. The Release run covers them whole; the sanitizer still walks the same code.
using test::kSanitized;

// A problem over explicit operators: one layer per `layer_size` operators.
PartitionProblem problem_of(OperatorTable ops, std::vector<int> in_flight, double budget, double bandwidth = 0,
                            int layer_size = 1) {
  PartitionProblem p;
  const int n = ops.size();
  p.ops = std::move(ops);
  for (int v = 0; v < n; v += layer_size) p.layer_starts.push_back(v);
  p.budget.assign(in_flight.size(), budget);
  p.in_flight = std::move(in_flight);
  p.host_bandwidth = bandwidth;
  p.bytes_per_parameter = 16;
  p.solver = MemorySolver::Exact;  // the theorem assumes exact stage costs
  return p;
}

OperatorTable random_ops(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> time(0.2, 3), bytes(0, 40), edge(1, 25);
  OperatorTable ops;
  for (int v = 0; v < n; ++v) {
    ops.forward.push_back(time(rng));
    ops.backward.push_back(ops.forward.back() * (1.5 + (rng() % 3) * 0.5));
    ops.saved.push_back(rng() % 6 == 0 ? 0 : bytes(rng));
    ops.workspace.push_back(bytes(rng) / 8);
    ops.parameters.push_back(rng() % 4 == 0 ? 0.5 : 0);
    ops.tied_to.push_back(kNotTied);
    ops.inputs.emplace_back();
    if (v > 0) ops.inputs[v].push_back({v - 1, edge(rng)});
    if (v > 3 && rng() % 3 == 0) ops.inputs[v].push_back({static_cast<int>(rng() % (v - 2)), edge(rng)});
  }
  return ops;
}

std::vector<int> one_f_one_b(int p) {
  std::vector<int> k;
  for (int s = 0; s < p; ++s) k.push_back(p - s);
  return k;
}

// The theorem of docs/partitioner.md, checked: on every small graph the binary search finds the
// bottleneck exhaustive search finds, with memory tight enough that stages must recompute or offload.
TEST(Partitioner, BinarySearchEqualsExhaustiveSearch) {
  std::mt19937 rng(11), share_rng(5);
  std::uniform_real_distribution<double> share(0, 1);
  int memory_bound = 0;
  const int trials = kSanitized ? 15 : 60;
  for (int trial = 0; trial < trials; ++trial) {
    const int stages = 2 + trial % 3;
    const bool offload = trial % 4 == 3;
    const int n = offload ? 8 + trial % 7 : 10 + trial % 21;  // up to 30 operators
    OperatorTable ops = random_ops(rng, n);
    if (trial % 5 == 2) {  // neighbours that save shared tensors (a stage's cost still grows with its range)
      ops.shared.assign(n, 0);
      for (int v = 1; v < n; ++v)
        if (share_rng() % 2 == 0) ops.shared[v] = share(share_rng) * std::min(ops.saved[v - 1], ops.saved[v]);
    }
    double total = 0;
    for (int v = 0; v < n; ++v) total += ops.saved[v];
    // Between a quarter and the whole of what 1F1B's first stage would hold with an even split.
    const double budget = total * stages / stages * (0.25 + 0.15 * (trial % 6)) + 8;
    PartitionProblem problem = problem_of(std::move(ops), one_f_one_b(stages), budget, offload ? 30 : 0);
    if (trial % 3 == 1) {  // some cuts forbidden (as make_partition_problem forbids expensive ones)
      problem.cut_allowed.assign(n + 1, 1);
      for (int j = 1; j < n; ++j) problem.cut_allowed[j] = rng() % 3 != 0 || j < stages;  // enough cuts remain
    }
    const PartitionResult exhaustive = partition_model(problem, PartitionMethod::Exhaustive);
    const PartitionResult dawn = partition_model(problem, PartitionMethod::Dawn);
    ASSERT_EQ(dawn.fits, exhaustive.fits) << "trial " << trial;
    if (!dawn.fits) continue;
    EXPECT_NEAR(dawn.bottleneck, exhaustive.bottleneck, 1e-7 * exhaustive.bottleneck) << "trial " << trial;
    const PartitionResult keep = partition_model(problem, PartitionMethod::PipeDream);
    if (!keep.fits || keep.bottleneck > dawn.bottleneck * (1 + 1e-9)) ++memory_bound;
    for (const StageResult& stage : dawn.stages) {
      EXPECT_TRUE(stage.memory.fits);
      if (!problem.cut_allowed.empty()) {
        EXPECT_TRUE(problem.cut_allowed[stage.begin]) << "trial " << trial;
      }
    }
  }
  EXPECT_GT(memory_bound, trials / 6);  // the memory decisions mattered in many trials
}

// A random DAG shaped like a captured CNN or U-Net: a chain in layers of 2 to 5 operators; a layer
// may end in a residual join of its input, and a later join (a concatenation) may read an output
// from several layers back, so that tensors cross several cuts. Joins save nothing; every edge
// carries its producer's whole output.
OperatorTable random_dag(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> time(0.2, 3), bytes(1, 30);
  OperatorTable ops;
  std::vector<int> skip_sources;  // outputs a later concatenation reads
  int layer = -1, left_in_layer = 0, layer_input = -1;
  for (int v = 0; v < n; ++v) {
    if (left_in_layer == 0) ++layer, left_in_layer = 2 + static_cast<int>(rng() % 4), layer_input = v - 1;
    --left_in_layer;
    ops.forward.push_back(time(rng));
    ops.backward.push_back(ops.forward.back() * (1.5 + (rng() % 3) * 0.5));
    ops.workspace.push_back(bytes(rng) / 8);
    ops.parameters.push_back(rng() % 3 == 0 ? 0.5 : 0);
    ops.tied_to.push_back(kNotTied);
    ops.layer.push_back(layer);
    ops.output.push_back(2 * bytes(rng));  // outputs up to twice what an operator saves
    ops.inputs.emplace_back();
    if (v > 0) ops.inputs[v].push_back({v - 1, ops.output[v - 1]});
    int skip = -1;
    if (left_in_layer == 0 && layer_input >= 0 && layer_input < v - 1 && rng() % 2 == 0) {
      skip = layer_input;  // the residual
    } else if (!skip_sources.empty() && skip_sources.back() < v - 2 && rng() % 2 == 0) {
      skip = skip_sources.back();  // the innermost open U-Net skip
      skip_sources.pop_back();
    }
    if (skip >= 0) ops.inputs[v].push_back({skip, ops.output[skip]});
    // A join saves nothing; other operators save their input, their output or something else.
    ops.saved.push_back(skip >= 0 ? 0 : rng() % 3 == 0 && v > 0 ? ops.output[v - 1] : bytes(rng));
    if (rng() % 3 == 0) skip_sources.push_back(v);
  }
  index_tensors(ops);
  return ops;
}

// The binary search equals exhaustive search on random DAGs whose skips cross several cuts: stages
// that carry a tensor hold it, a stage's cost is then not monotone in its start, and the search over
// every reachable cut finds what the greedies miss (on these trials the greedies alone miss the
// optimum in a few: the test fails without the search). The budgets make the memory decisions
// matter, some trials allow offloading and some forbid cuts.
TEST(Partitioner, BinarySearchEqualsExhaustiveSearchOnRandomDags) {
  std::mt19937 rng(1);
  int memory_bound = 0, carrying = 0;
  const int trials = kSanitized ? 12 : 48;
  for (int trial = 0; trial < trials; ++trial) {
    const int stages = 2 + trial % 3;
    const bool offload = trial % 4 == 3;
    const int n = offload ? 8 + trial % 9 : 10 + trial % 15;  // up to 24 operators
    OperatorTable ops = random_dag(rng, n);
    double total = 0;
    for (int v = 0; v < n; ++v) total += ops.saved[v];
    const double budget = total * (0.3 + 0.15 * (trial % 6)) + 8;
    PartitionProblem problem = problem_of(std::move(ops), one_f_one_b(stages), budget, offload ? 30 : 0);
    problem.layer_starts.clear();
    for (int v = 0; v < n; ++v)
      if (v == 0 || problem.ops.layer[v] != problem.ops.layer[v - 1]) problem.layer_starts.push_back(v);
    if (trial % 3 == 1) {
      problem.cut_allowed.assign(n + 1, 1);
      for (int j = 1; j < n; ++j) problem.cut_allowed[j] = rng() % 3 != 0 || j < stages;
    }
    const PartitionResult exhaustive = partition_model(problem, PartitionMethod::Exhaustive);
    const PartitionResult dawn = partition_model(problem, PartitionMethod::Dawn);
    ASSERT_EQ(dawn.fits, exhaustive.fits) << "trial " << trial;
    if (!dawn.fits) continue;
    EXPECT_NEAR(dawn.bottleneck, exhaustive.bottleneck, 1e-7 * exhaustive.bottleneck) << "trial " << trial;
    const PartitionResult keep = partition_model(problem, PartitionMethod::PipeDream);
    if (!keep.fits || keep.bottleneck > dawn.bottleneck * (1 + 1e-9)) ++memory_bound;
    bool carries = false;
    for (const StageResult& stage : dawn.stages) {
      EXPECT_TRUE(stage.memory.fits);
      carries = carries || stage.memory.input_bytes > 0;
    }
    carrying += carries;
  }
  EXPECT_GT(memory_bound, trials / 4);  // the memory decisions mattered in many trials
  EXPECT_GT(carrying, trials / 4);      // and so did the tensors stages hold as their input
}

// On the ResNet block and the U-Net of tests/common/dag_graphs.h, for budgets from what nothing fits
// in to what keeps everything, the binary search equals exhaustive search.
TEST(Partitioner, BinarySearchEqualsExhaustiveSearchOnAResidualBlockAndAUNet) {
  for (const CostGraph& graph : {test::residual_block_graph(), test::unet_graph()})
    for (int stages : {2, 3, 4}) {
      for (double budget = 40; budget <= 200; budget += 4) {
        for (double bandwidth : {0.0, 4.0}) {
          PartitionProblem problem =
              problem_of(make_operator_table(graph, {1, 1}), one_f_one_b(stages), budget, bandwidth);
          const PartitionResult exhaustive = partition_model(problem, PartitionMethod::Exhaustive);
          const PartitionResult dawn = partition_model(problem, PartitionMethod::Dawn);
          const std::string where = graph.name + ", " + std::to_string(stages) + " stages, budget " +
                                    std::to_string(budget) + ", bandwidth " + std::to_string(bandwidth);
          ASSERT_EQ(dawn.fits, exhaustive.fits) << where;
          if (dawn.fits) {
            EXPECT_NEAR(dawn.bottleneck, exhaustive.bottleneck, 1e-7 * exhaustive.bottleneck) << where;
          }
        }
      }
    }
}

// The partitioner's model and the aggregation the simulator reads hold the same bytes per
// micro-batch on every stage of the two DAGs, kept and recomputed: k copies of the activations (or
// checkpoints, with the stage input) plus one rebuilt segment.
TEST(Partitioner, TheModelAndTheAggregationAgreeOnDags) {
  struct Case {
    CostGraph graph;
    std::vector<int> sizes;
  };
  for (const Case& c : {Case{test::residual_block_graph(), {3, 4, 2}}, Case{test::unet_graph(), {2, 2, 2, 3, 4}}}) {
    const OperatorTable ops = make_operator_table(c.graph, {1, 1});
    const Partition partition = partition_from_sizes(c.graph, c.sizes);
    for (MemoryDecision decision : {MemoryDecision::Keep, MemoryDecision::Recompute}) {
      AggregationOptions options;
      options.decisions.assign(c.graph.nodes.size(), decision);
      const StageAggregate aggregate = aggregate_stages(c.graph, partition, options);
      const int stages = static_cast<int>(c.sizes.size());
      for (int s = 0, begin = 0; s < stages; begin += c.sizes[s++]) {
        StageContext context;
        context.in_flight = stages - s;
        const StageMemoryPlan plan = evaluate_stage_memory(ops, begin, begin + c.sizes[s], context,
                                                           std::vector<MemoryDecision>(c.sizes[s], decision));
        const StageCosts& row = aggregate.table.stages[s];
        const double k = context.in_flight;
        const double expected = decision == MemoryDecision::Keep ? k * row.activation_bytes
                                                                 : k * row.checkpoint_bytes + row.rebuilt_peak_bytes;
        EXPECT_DOUBLE_EQ(plan.activation_memory, expected) << c.graph.name << " stage " << s;
        EXPECT_DOUBLE_EQ(plan.input_bytes, aggregate.details[s].held_input_bytes) << c.graph.name << " stage " << s;
      }
    }
  }
}

// Stopped at once, the bisection answers with its first feasible partition: it fits, and its
// bottleneck is no better than the full search's.
// Stages hold different micro-batch counts, so taking the longest range first can strand a later
// stage: here the first stage can hold operators 0-1, which leaves the second (k = 2, 9 bytes) only the
// heavy operator 2. Only the last stage (k = 1, 25 bytes) can hold the two heavy operators, which the
// greedy from the last stage finds.
TEST(Partitioner, AGreedyFromTheLastStageFindsWhatTheFirstStrands) {
  OperatorTable ops;
  ops.forward = {1, 1, 1, 1};
  ops.backward = {2, 2, 2, 2};
  ops.saved = {1, 1, 10, 10};
  ops.workspace = ops.parameters = {0, 0, 0, 0};
  ops.tied_to.assign(4, kNotTied);
  ops.inputs.resize(4);
  PartitionProblem p = problem_of(ops, {3, 2, 1}, 0);
  p.budget = {100, 9, 25};
  const PartitionResult dawn = partition_model(p, PartitionMethod::Dawn);
  ASSERT_TRUE(dawn.fits);
  EXPECT_EQ(dawn.starts(), (std::vector<int>{0, 1, 2, 4}));
  const PartitionResult exhaustive = partition_model(p, PartitionMethod::Exhaustive);
  EXPECT_DOUBLE_EQ(dawn.bottleneck, exhaustive.bottleneck);

  // The same with a light operator in front and the cut before operator 2 forbidden. With time not
  // counting, the greedy from the first stage takes operators 0-2 and strands the second stage on
  // operator 3 (20 bytes). The one from the last must leave an allowed cut for each earlier stage, so
  // the last stage starts at 3, not 2, although it could hold 2-4 (21 of 25 bytes); the only partition
  // that fits is found.
  ops.forward.push_back(1);
  ops.backward.push_back(2);
  ops.saved = {1, 1, 1, 10, 10};
  ops.workspace.push_back(0);
  ops.parameters.push_back(0);
  ops.tied_to.push_back(kNotTied);
  ops.inputs.emplace_back();
  PartitionProblem forbidden = problem_of(ops, {3, 2, 1}, 0);
  forbidden.budget = {100, 9, 25};
  forbidden.cut_allowed = {1, 1, 0, 1, 1, 1};
  const PartitionResult stepped = partition_model(forbidden, PartitionMethod::Dawn);
  ASSERT_TRUE(stepped.fits);
  EXPECT_EQ(stepped.starts(), (std::vector<int>{0, 1, 3, 5}));
  EXPECT_DOUBLE_EQ(stepped.bottleneck, partition_model(forbidden, PartitionMethod::Exhaustive).bottleneck);
}

TEST(Partitioner, StopsEarlyWithAFeasiblePartition) {
  std::mt19937 rng(3);
  OperatorTable ops = random_ops(rng, 24);
  double total = 0;
  for (double saved : ops.saved) total += saved;
  PartitionProblem problem = problem_of(std::move(ops), one_f_one_b(3), total * 0.6 + 8);
  const PartitionResult full = partition_model(problem, PartitionMethod::Dawn);
  ASSERT_TRUE(full.fits);
  int asked = 0;
  problem.should_stop = [&] { return ++asked > 0; };
  const PartitionResult early = partition_model(problem, PartitionMethod::Dawn);
  EXPECT_GT(asked, 0);
  ASSERT_TRUE(early.fits);
  EXPECT_GE(early.bottleneck, full.bottleneck * (1 - 1e-12));
  for (const StageResult& stage : early.stages) EXPECT_TRUE(stage.memory.fits);
}

// Progress comes phase by phase in the documented order, each phase's steps counting up, and the
// answer is the one found without listening.
TEST(Partitioner, ReportsItsPhasesInOrder) {
  const std::vector<std::string> order = {"a partition that fits", "what would fit",
                                          "a period that fits",    "bisection",
                                          "every reachable cut",   "bisection over every reachable cut",
                                          "stage decisions"};
  auto phases_of = [&](PartitionProblem problem) {
    std::vector<std::string> phases;
    int64_t evaluations = 0;
    int step = -1;
    problem.progress = [&](const PartitionProgress& p) {
      EXPECT_GE(p.evaluations, evaluations);
      evaluations = p.evaluations;
      if (!phases.empty() && phases.back() == p.phase) {
        EXPECT_GE(p.step, step) << p.phase;
      } else {
        phases.push_back(p.phase);
      }
      step = p.step;
    };
    const PartitionResult result = partition_model(problem, PartitionMethod::Dawn);
    problem.progress = nullptr;
    const PartitionResult quiet = partition_model(problem, PartitionMethod::Dawn);
    EXPECT_EQ(result.starts(), quiet.starts());
    EXPECT_EQ(result.bottleneck, quiet.bottleneck);
    EXPECT_EQ(result.evaluations, evaluations);
    return phases;
  };
  std::mt19937 rng(3);
  for (double share : {0.6, 0.01}) {  // memory decisions matter; nothing fits
    OperatorTable ops = random_ops(rng, 24);
    double total = 0;
    for (double saved : ops.saved) total += saved;
    const std::vector<std::string> phases = phases_of(problem_of(std::move(ops), one_f_one_b(3), total * share + 8));
    ASSERT_GE(phases.size(), 2u);
    EXPECT_EQ(phases.front(), "a partition that fits");
    EXPECT_EQ(phases.back(), share > 0.5 ? "stage decisions" : "what would fit");
    size_t at = 0;  // each phase comes later in the order than the one before
    for (const std::string& phase : phases) {
      const auto it = std::find(order.begin() + at, order.end(), phase);
      ASSERT_NE(it, order.end()) << phase;
      at = it - order.begin() + 1;
    }
  }
}

// A tensor two operators save counts once, and only where both are in the stage: in the plans the
// search answers with, and in its keep-everything shortcut, which solves no stage where keeping
// everything fits (evaluations count the stages it had to solve).
TEST(Partitioner, SharedTensorsCountOnceWithinAStage) {
  OperatorTable ops;
  ops.forward = {1, 1, 1, 1};
  ops.backward = {2, 2, 2, 2};
  ops.saved = {10, 40, 30, 20};
  ops.shared = {0, 0, 25, 0};  // c saves 25 of b's bytes too
  ops.workspace = ops.parameters = {0, 0, 0, 0};
  ops.tied_to = {kNotTied, kNotTied, kNotTied, kNotTied};
  ops.inputs = {{}, {{0, 1}}, {{1, 1}}, {{2, 1}}};
  // Dawn's bottleneck: 6 (forward and backward) where keeping everything fits, 7 where an operator
  // must be recomputed.
  auto dawn = [&](std::vector<int> in_flight, std::vector<double> budget, std::vector<char> cuts) {
    PartitionProblem problem = problem_of(ops, std::move(in_flight), 0, 0, 4);
    problem.budget = std::move(budget);
    problem.cut_allowed = std::move(cuts);
    const PartitionResult r = partition_model(problem, PartitionMethod::Dawn);
    EXPECT_TRUE(r.fits);
    return r;
  };
  const std::vector<char> none_inside{1, 0, 0, 0, 1};
  const PartitionResult kept = dawn({2}, {150}, none_inside);  // 2 x (10 + 40 + 30 - 25 + 20)
  EXPECT_EQ(kept.bottleneck, 12);
  EXPECT_EQ(kept.evaluations, 0);
  const PartitionResult recomputed = dawn({2}, {149.5}, none_inside);  // d recomputed: 2 x (55 + 1) + 20
  EXPECT_EQ(recomputed.bottleneck, 13);
  EXPECT_GT(recomputed.evaluations, 0);
  // Cut between b and c: the second stage holds c's 30 whole.
  const std::vector<char> only_the_middle{1, 0, 1, 0, 1};
  const PartitionResult split = dawn({3, 2}, {150, 100}, only_the_middle);
  EXPECT_EQ(split.bottleneck, 6);
  EXPECT_EQ(split.evaluations, 0);
  const PartitionResult tighter = dawn({3, 2}, {150, 99.5}, only_the_middle);
  EXPECT_EQ(tighter.bottleneck, 7);
  EXPECT_GT(tighter.evaluations, 0);
}

TEST(Partitioner, StagesAreContiguousAndCoverTheGraph) {
  std::mt19937 rng(3);
  const PartitionProblem problem = problem_of(random_ops(rng, 40), one_f_one_b(4), 1e9);
  const PartitionResult r = partition_model(problem, PartitionMethod::Dawn);
  ASSERT_TRUE(r.fits);
  const std::vector<int> starts = r.starts();
  ASSERT_EQ(starts.size(), 5u);
  EXPECT_EQ(starts.front(), 0);
  EXPECT_EQ(starts.back(), 40);
  for (int s = 0; s < 4; ++s) EXPECT_LT(starts[s], starts[s + 1]);
  // Unlimited memory: the bottleneck is the min-max compute split, which PipeDream's layer DP (one
  // operator per layer here) also finds.
  EXPECT_NEAR(r.bottleneck, partition_model(problem, PartitionMethod::PipeDream).bottleneck, 1e-9 * r.bottleneck);
}

// Four layers of two operators; the last layer holds three times the parameters of each other one.
OperatorTable layered() {
  OperatorTable ops;
  for (int v = 0; v < 8; ++v) {
    ops.forward.push_back(v < 2 ? 3 : 1);  // layer 0 computes three times as long
    ops.backward.push_back(2 * ops.forward.back());
    ops.saved.push_back(10);
    ops.workspace.push_back(0);
    ops.parameters.push_back(v >= 6 ? 0.15 : 0.05);
    ops.tied_to.push_back(kNotTied);
    ops.layer.push_back(v / 2);
    ops.inputs.emplace_back();
    if (v > 0) ops.inputs[v].push_back({v - 1, 5});
  }
  return ops;
}

TEST(Partitioner, BaselinesOnHandComputedLayers) {
  const PartitionProblem problem = problem_of(layered(), {2, 1}, 1e9, 0, 2);
  // Uniform: two layers each.
  EXPECT_EQ(partition_model(problem, PartitionMethod::Uniform).starts(), (std::vector<int>{0, 4, 8}));
  // Compute per layer: 18, 6, 6, 6 -> PipeDream puts layer 0 alone (max 18).
  const PartitionResult pipedream = partition_model(problem, PartitionMethod::PipeDream);
  EXPECT_EQ(pipedream.starts(), (std::vector<int>{0, 2, 8}));
  EXPECT_DOUBLE_EQ(pipedream.bottleneck, 18);
  // Parameters per layer 0.1, 0.1, 0.1, 0.3: the last layer alone balances them.
  EXPECT_EQ(partition_model(problem, PartitionMethod::Params).starts(), (std::vector<int>{0, 6, 8}));
  // Memory of PipeDream's split: stage 0 holds 2 micro-batches x 20 bytes + 0.1 x 16 of parameters.
  EXPECT_DOUBLE_EQ(pipedream.stages[0].memory.memory, 40 + 1.6);
  EXPECT_DOUBLE_EQ(pipedream.stages[1].memory.memory, 60 + 0.5 * 16);
}

// The compute- and parameter-balanced baselines before they bisected: every last cut scanned,
// O(S U^2). The reference their answers, ties included, must equal.
std::vector<int> balance_by_scanning(const std::vector<double>& weights, int stages) {
  const int units = static_cast<int>(weights.size());
  std::vector<double> prefix(units + 1, 0);
  for (int u = 0; u < units; ++u) prefix[u + 1] = prefix[u] + weights[u];
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(units + 1, kInfinity));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(units + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int u = s; u <= units; ++u)
      for (int c = s - 1; c < u; ++c) {
        const double value = std::max(best[s - 1][c], prefix[u] - prefix[c]);
        if (value < best[s][u]) best[s][u] = value, cut[s][u] = c;
      }
  std::vector<int> starts(stages + 1, units);
  for (int s = stages, u = units; s > 0; --s) {
    u = cut[s][u];
    starts[s - 1] = u;
  }
  return starts;
}

// What PipeDream's and the parameter balance's partitions are by the scanning program: layers as
// units (operators when there are fewer layers than stages), each weighing its operators' sum.
std::vector<int> scanned_partition(const PartitionProblem& problem, const std::vector<double>& per_operator) {
  const int n = problem.ops.size();
  std::vector<int> units = problem.layer_starts;
  if (static_cast<int>(units.size()) < problem.num_stages()) {
    units.clear();
    for (int v = 0; v < n; ++v) units.push_back(v);
  }
  std::vector<double> weights;
  for (size_t u = 0; u < units.size(); ++u) {
    double w = 0;
    for (int v = units[u]; v < (u + 1 < units.size() ? units[u + 1] : n); ++v) w += per_operator[v];
    weights.push_back(w);
  }
  const std::vector<int> split = balance_by_scanning(weights, problem.num_stages());
  std::vector<int> starts;
  for (size_t s = 0; s + 1 < split.size(); ++s) starts.push_back(units[split[s]]);
  starts.push_back(n);
  return starts;
}

TEST(Partitioner, BalancedBaselinesEqualTheScanningProgramTiesIncluded) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 60);
    OperatorTable ops = random_ops(rng, n);
    // Whole-number times and many zero-parameter layers: ties everywhere.
    for (int v = 0; v < n; ++v) {
      if (trial % 2 == 0) ops.forward[v] = static_cast<double>(rng() % 3), ops.backward[v] = 0;
      if (rng() % 3 == 0) ops.parameters[v] = 0;
    }
    const int stages = 1 + static_cast<int>(rng() % std::min(n, 9));
    PartitionProblem problem = problem_of(std::move(ops), std::vector<int>(stages, 1), 1e12, 0, 1 + rng() % 4);
    std::vector<double> compute(n);
    for (int v = 0; v < n; ++v) compute[v] = problem.ops.forward[v] + problem.ops.backward[v];
    EXPECT_EQ(partition_model(problem, PartitionMethod::PipeDream).starts(), scanned_partition(problem, compute))
        << "trial " << trial;
    EXPECT_EQ(partition_model(problem, PartitionMethod::Params).starts(),
              scanned_partition(problem, problem.ops.parameters))
        << "trial " << trial;
  }
}

TEST(Partitioner, VPipeRecomputesWholeLayersWherePipeDreamDoesNotFit) {
  // Budget 70: PipeDream's stage 0 (layer 0, k = 8) needs 8 x 20 + 1.6; its stage 1 needs 68.
  const PartitionProblem problem = problem_of(layered(), {8, 1}, 70, 0, 2);
  EXPECT_FALSE(partition_model(problem, PartitionMethod::PipeDream).fits);
  const PartitionResult vpipe = partition_model(problem, PartitionMethod::VPipe);
  ASSERT_TRUE(vpipe.fits);
  // Layer 0 recomputed: nothing kept, 20 rebuilt once; adds its forward (6) to stage 0.
  EXPECT_EQ(vpipe.stages[0].memory.decisions,
            (std::vector<MemoryDecision>{MemoryDecision::Recompute, MemoryDecision::Recompute}));
  EXPECT_DOUBLE_EQ(vpipe.stages[0].time, 24);
  // Dawn chooses per operator and moves the cut: never slower than vPipe.
  const PartitionResult dawn = partition_model(problem, PartitionMethod::Dawn);
  ASSERT_TRUE(dawn.fits);
  EXPECT_LE(dawn.bottleneck, vpipe.bottleneck);
  // Told to stop, it makes no move: the stage stays over its budget.
  PartitionProblem stopped = problem;
  stopped.should_stop = [] { return true; };
  EXPECT_FALSE(partition_model(stopped, PartitionMethod::VPipe).fits);
}

TEST(Partitioner, VPipeRecomputesPastALayerThatAloneSavesNothing) {
  // k = 1, budget 60: PipeDream's stage 1 (layers 1-3) keeps 60 bytes + 8 of parameters. Recomputing
  // one layer saves nothing (it rebuilds the 20 bytes it stops keeping, and checkpoints its input); a
  // second one saves 20 less the checkpoint of its input (5): layers 1 and 2 recomputed hold 20 kept
  // + 5 + 5 (the stage's received input, which layer 1's rebuild reads) + 20 rebuilt + 8.
  const PartitionProblem problem = problem_of(layered(), {1, 1}, 60, 0, 2);
  const PartitionResult vpipe = partition_model(problem, PartitionMethod::VPipe);
  ASSERT_TRUE(vpipe.fits);
  constexpr MemoryDecision K = MemoryDecision::Keep, R = MemoryDecision::Recompute;
  EXPECT_EQ(vpipe.stages[1].memory.decisions, (std::vector<MemoryDecision>{R, R, R, R, K, K}));
  EXPECT_DOUBLE_EQ(vpipe.stages[1].memory.memory, 20 + 5 + 5 + 20 + 8);
}

TEST(Partitioner, CannotFitSaysByHowMuch) {
  // With a split backward and k = 1, recomputing saves nothing (everything is rebuilt at once): the
  // best split holds operators 0-3 (40 saved + 0.2 x 16) and 4-7 (40 + 0.4 x 16 = 46.4), so a 40-byte
  // budget is 6.4 bytes short.
  PartitionProblem problem = problem_of(layered(), {1, 1}, 40, 0, 2);
  problem.split_backward = true;
  const PartitionResult r = partition_model(problem, PartitionMethod::Dawn);
  EXPECT_FALSE(r.fits);
  EXPECT_NEAR(r.shortfall, 6.4, 1e-4);
  // Asked only whether it fits (as the search and the largest-micro-batch search ask), it measures
  // nothing.
  problem.measure_shortfall = false;
  const PartitionResult quick = partition_model(problem, PartitionMethod::Dawn);
  EXPECT_FALSE(quick.fits);
  EXPECT_EQ(quick.shortfall, 0);
  problem.measure_shortfall = true;
  // A whole backward rebuilds one layer at a time: operators 4-7 recomputed hold one layer (20), the
  // checkpointed inputs of both layers (the stage's received input and the second layer's, 5 each)
  // and 6.4 of parameters, so the same budget fits.
  problem.split_backward = false;
  const PartitionResult whole = partition_model(problem, PartitionMethod::Dawn);
  ASSERT_TRUE(whole.fits);
  for (const StageResult& stage : whole.stages) EXPECT_LE(stage.memory.memory, 40);
}

TEST(Partitioner, ZooProblemsCutWhereLittleCrosses) {
  const CostGraph graph = build_model_graph(find_model("gpt3-1.3b"), find_hardware("H100-80GB"));
  const PartitionProblem problem =
      make_partition_problem(graph, {1, graph.reference.seq_len}, make_builtin("1f1b", {4, 8, 0}), 80e9, 0);
  ASSERT_EQ(problem.cut_allowed.size(), graph.nodes.size() + 1);
  auto allowed = [&](const std::string& before) { return problem.cut_allowed[find_node(graph, before) + 1] != 0; };
  EXPECT_TRUE(allowed("layer.3.residual2"));  // between layers: the residual stream only
  EXPECT_TRUE(allowed("layer.3.residual1"));  // mid-block, the residual stream only
  EXPECT_FALSE(allowed("layer.3.softmax"));   // an attention map would cross
  EXPECT_FALSE(allowed("layer.3.fc1"));       // a 4h-wide activation would cross
}

TEST(Partitioner, RejectsImpossibleProblems) {
  EXPECT_THROW(partition_model(problem_of(layered(), std::vector<int>(9, 1), 1e9), PartitionMethod::Dawn), Error);
  EXPECT_THROW(parse_partition_method("magic"), Error);
  EXPECT_THROW(evaluate_partition(problem_of(layered(), {1, 1}, 1e9), {0, 0, 8}, true), Error);
}

// Below a failing size, the largest passing one even when passing is not monotone (the simulation
// check's budget rounds converge at some sizes and not at smaller ones).
TEST(Partitioner, LargestPassingBelowGallopsDownThenBisects) {
  std::vector<int> asked;
  auto gap = [&](int b) {
    asked.push_back(b);
    return b <= 30 || (b >= 50 && b <= 57);
  };
  EXPECT_EQ(largest_passing_below(60, gap), 57);  // 59, 58, 56 passes; then 57
  EXPECT_EQ(asked, (std::vector<int>{59, 58, 56, 57}));
  EXPECT_EQ(largest_passing_below(1000, [](int b) { return b <= 371; }), 371);
  EXPECT_EQ(largest_passing_below(1000, [](int) { return false; }), 0);
  EXPECT_EQ(largest_passing_below(1, [](int) { return true; }), 0);
  EXPECT_EQ(largest_passing_below(2, [](int) { return true; }), 1);
}

TEST(Partitioner, MaxMicroBatchOnAZooModel) {
  if (kSanitized) GTEST_SKIP() << "about a minute under the sanitizer; the Release run checks it";
  const CostGraph graph = build_model_graph(find_model("gpt3-2.7b"), find_hardware("H100-80GB"));
  const Schedule schedule = make_builtin("1f1b", {4, 8, 0});
  const double pcie = link_bandwidth_per_ms(find_hardware("H100-80GB"), Interconnect::Pcie);
  auto at = [&](int b) {
    return make_partition_problem(graph, {double(b), graph.reference.seq_len}, schedule, 80e9, pcie);
  };
  const int dawn = max_microbatch_size(at, PartitionMethod::Dawn, 512);
  const int pipedream = max_microbatch_size(at, PartitionMethod::PipeDream, 512);
  const int vpipe = max_microbatch_size(at, PartitionMethod::VPipe, 512);
  EXPECT_GE(pipedream, 1);
  EXPECT_GE(dawn, 3 * pipedream);
  EXPECT_GE(dawn, vpipe);
  EXPECT_GE(vpipe, pipedream);
  EXPECT_TRUE(partition_model(at(dawn), PartitionMethod::Dawn).fits);
  EXPECT_FALSE(partition_model(at(dawn + 1), PartitionMethod::Dawn).fits);
}

}  // namespace
}  // namespace flexpipe
