// DawnPiper-style binary partitioning (docs/partitioner.md). The stage cost c_s(i, j; T) is the
// compute of operators [i, j) plus the least time its memory decisions add to fit stage s's budget
// when the pipeline's period is T (infinite when nothing fits). It is interval-monotone (a sub-range
// never costs more), so for a target T the greedy that gives each stage, in order, the longest range
// it can afford decides feasibility exactly, and a bisection on T finds the optimal bottleneck.
// This file: the methods' names, the problem built from a cost graph, the checks, the stage
// decisions at a partition's period, and the dispatch to each method's file.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "stage_cost.h"

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

namespace partition {

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

PartitionResult decide_stages(const PartitionProblem& problem, StageCost& cost, const std::vector<int>& starts,
                              bool optimize, PartitionMethod method) {
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

}  // namespace partition

using partition::check_problem;

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
  partition::StageCost cost(problem);
  if (optimize_memory) return partition::decide_stages(problem, cost, starts, true, PartitionMethod::Dawn);
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
    case PartitionMethod::Dawn: return partition::binary_partition(problem);
    case PartitionMethod::Exhaustive: return partition::exhaustive_partition(problem);
    case PartitionMethod::Uniform:
      result = evaluate_partition(problem, partition::uniform_starts(problem), false);
      break;
    case PartitionMethod::Params:
      result = evaluate_partition(problem, partition::balanced_by(problem, problem.ops.parameters), false);
      break;
    case PartitionMethod::PipeDream:
      result = evaluate_partition(problem, partition::balanced_by(problem, compute), false);
      break;
    case PartitionMethod::VPipe: {
      partition::StageCost cost(problem);
      result = partition::vpipe_partition(problem, cost, partition::balanced_by(problem, compute));
      break;
    }
  }
  result.method = method;
  return result;
}

}  // namespace flexpipe