// Stage memory model and the keep / recompute / offload choice (docs/partitioner.md).
#include "flexpipe/core/stage_memory.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "flexpipe/core/error.h"

namespace flexpipe {

namespace {

// Per global stage: the most micro-batches held at once, walking every device list once.
std::vector<int> peak_held(const Schedule& schedule) {
  std::vector<int> held(schedule.num_stages(), 0), peak(schedule.num_stages(), 0);
  for (const std::vector<Action>& actions : schedule.device_actions)
    for (const Action& a : actions) {
      auto add = [&](int stage) { peak[stage] = std::max(peak[stage], ++held[stage]); };
      switch (a.kind) {
        case ActionKind::F: add(a.stage); break;
        case ActionKind::B:
        case ActionKind::W: --held[a.stage]; break;
        case ActionKind::Overlap:
          add(a.stage);
          if (a.sub_kind == ActionKind::B) --held[a.stage2];
          break;
        default: break;
      }
    }
  return peak;
}

}  // namespace

std::vector<int> in_flight_per_chunk(const Schedule& schedule) {
  const std::vector<int> peak = peak_held(schedule);
  std::vector<int> chunks(schedule.stages_per_pipeline, 0);
  for (int s = 0; s < schedule.num_stages(); ++s)
    chunks[schedule.chunk_of_stage(s)] = std::max(chunks[schedule.chunk_of_stage(s)], peak[s]);
  return chunks;
}

std::vector<int> chunks_sharing_device(const Schedule& schedule) {
  std::vector<int> per_device(schedule.num_devices, 0);
  for (int s = 0; s < schedule.num_stages(); ++s) ++per_device[schedule.stage_device[s]];
  std::vector<int> chunks(schedule.stages_per_pipeline, 1);
  for (int s = 0; s < schedule.num_stages(); ++s)
    chunks[schedule.chunk_of_stage(s)] = std::max(chunks[schedule.chunk_of_stage(s)], per_device[schedule.stage_device[s]]);
  return chunks;
}

OperatorTable make_operator_table(const CostGraph& graph, const Shape& shape) {
  OperatorTable ops;
  const int n = static_cast<int>(graph.nodes.size());
  ops.forward.resize(n);
  ops.backward.resize(n);
  ops.saved.resize(n);
  ops.workspace.resize(n);
  ops.parameters.resize(n);
  ops.inputs.resize(n);
  ops.tied_to.resize(n);
  for (int i = 0; i < n; ++i) {
    const OperatorNode& node = graph.nodes[i];
    ops.forward[i] = operator_time(graph, node, Pass::Forward, shape);
    ops.backward[i] = operator_time(graph, node, Pass::BackwardInput, shape) +
                      operator_time(graph, node, Pass::BackwardWeight, shape);
    ops.saved[i] = node.saved_bytes.at(shape.microbatch_size, shape.seq_len);
    ops.workspace[i] = node.workspace_bytes.at(shape.microbatch_size, shape.seq_len);
    ops.parameters[i] = node.parameters;
    ops.tied_to[i] = node.tied_to;
  }
  for (const TensorEdge& edge : graph.edges)
    ops.inputs[edge.to].push_back({edge.from, edge.bytes.at(shape.microbatch_size, shape.seq_len)});
  return ops;
}

const char* memory_solver_name(MemorySolver solver) {
  switch (solver) {
    case MemorySolver::Exact: return "exact";
    case MemorySolver::Greedy: return "greedy";
    case MemorySolver::Auto: return "auto";
  }
  return "auto";
}

namespace {

// What a recomputed operator keeps as checkpoints: every input produced inside the stage, except the
// one from its immediate predecessor when that is recomputed too (the chain rebuilds it). Inputs from
// earlier stages are the stage's received inputs, held until the backward anyway.
double checkpoint_bytes(const OperatorTable& ops, int begin, int v, bool previous_recomputed) {
  double bytes = 0;
  for (const OperatorTable::InEdge& in : ops.inputs[v])
    if (in.from >= begin && !(in.from == v - 1 && previous_recomputed)) bytes += in.bytes;
  return bytes;
}

// Forwards arrive one per third of a period at most (a backward takes about twice a forward), so a
// transfer of t spans ceil(t / (T/3)) forward slots: that many micro-batches' offloaded bytes are still
// on their way out, besides the one just produced and the one reloaded for the next backward (its
// reload overlaps the compute action before that backward).
double forward_slot(const StageContext& context) { return context.period / 3; }

double transfer_time(double offload_bytes, const StageContext& context) {
  return context.host_bandwidth > 0 ? offload_bytes / context.host_bandwidth : kInfinity;
}

double offloaded_held(double offload_bytes, const StageContext& context) {
  if (offload_bytes <= 0) return 0;
  const double slots = std::max(1.0, std::ceil(transfer_time(offload_bytes, context) / forward_slot(context) - 1e-12));
  return std::min<double>(context.in_flight, 2 + slots) * offload_bytes;
}

// The reload starts one compute action (about a forward slot) ahead of the backward; the backward
// waits for whatever of the transfer is left.
double offload_penalty(double offload_bytes, const StageContext& context) {
  if (offload_bytes <= 0) return 0;
  if (context.host_bandwidth <= 0) return kInfinity;
  return std::max(0.0, transfer_time(offload_bytes, context) - forward_slot(context));
}

struct Fixed {
  double static_memory = 0;
  double workspace = 0;
};

Fixed fixed_memory(const OperatorTable& ops, int begin, int end, const StageContext& context) {
  Fixed fixed;
  double parameters = 0;
  for (int v = begin; v < end; ++v) {
    const int owner = ops.tied_to[v];
    if (!(owner != kNotTied && owner >= begin && owner < end)) parameters += ops.parameters[v];
    fixed.workspace = std::max(fixed.workspace, ops.workspace[v]);
  }
  fixed.static_memory = parameters * context.bytes_per_parameter;
  return fixed;
}

bool can_offload(const OperatorTable& ops, int v, const StageContext& context) {
  return context.allow_offload && context.host_bandwidth > 0 && context.in_flight > 3 && ops.saved[v] > 0;
}

// ---- greedy ----

StageMemoryPlan solve_greedy(const OperatorTable& ops, int begin, int end, const StageContext& context) {
  const int n = end - begin;
  const double k = context.in_flight;
  std::vector<MemoryDecision> d(n, MemoryDecision::Keep);
  StageMemoryPlan plan = evaluate_stage_memory(ops, begin, end, context, d);
  double deficit = plan.memory - context.budget;
  if (deficit <= 0) return plan;
  auto is = [&](int v, MemoryDecision m) { return v >= begin && v < end && d[v - begin] == m; };

  // Offloads the transfer hides cost nothing: largest first.
  double offloaded = 0;
  if (context.host_bandwidth > 0 && context.allow_offload) {
    std::vector<int> order;
    for (int v = begin; v < end; ++v)
      if (can_offload(ops, v, context)) order.push_back(v);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return ops.saved[a] > ops.saved[b]; });
    for (int v : order) {
      if (deficit <= 0) break;
      const double gain = k * ops.saved[v] - (offloaded_held(offloaded + ops.saved[v], context) -
                                              offloaded_held(offloaded, context));
      if (offload_penalty(offloaded + ops.saved[v], context) > 0 || gain <= 0) continue;
      d[v - begin] = MemoryDecision::Offload;
      offloaded += ops.saved[v];
      deficit -= gain;
    }
  }

  constexpr int kLongestChain = 24;
  while (deficit > 0) {
    // The best move: the cheapest that closes the deficit, else the most bytes per time unit.
    double best_gain = 0, best_cost = kInfinity, best_ratio = 0;
    bool best_closes = false;
    int best_a = -1, best_b = -1;
    bool best_is_offload = false;
    auto consider = [&](double gain, double cost, int a, int b, bool offload) {
      if (gain <= 0) return;
      const bool closes = gain >= deficit;
      const double ratio = cost > 0 ? gain / cost : kInfinity;
      const bool better = closes ? (!best_closes || cost < best_cost) : (!best_closes && ratio > best_ratio);
      if (!better) return;
      best_gain = gain, best_cost = cost, best_ratio = ratio, best_closes = closes;
      best_a = a, best_b = b, best_is_offload = offload;
    };
    const double penalty_now = offload_penalty(offloaded, context);
    for (int a = begin; a < end; ++a) {
      if (!is(a, MemoryDecision::Keep)) continue;
      if (can_offload(ops, a, context))
        consider(k * ops.saved[a] - (offloaded_held(offloaded + ops.saved[a], context) - offloaded_held(offloaded, context)),
                 offload_penalty(offloaded + ops.saved[a], context) - penalty_now, a, a, true);
      if (!context.allow_recompute) continue;
      double kept = 0, rebuilt = 0, checkpoints = 0, cost = 0;
      for (int b = a; b < end && b < a + kLongestChain && is(b, MemoryDecision::Keep); ++b) {
        kept += k * ops.saved[b];
        rebuilt += ops.saved[b];
        checkpoints += k * checkpoint_bytes(ops, begin, b, b > a || is(a - 1, MemoryDecision::Recompute));
        cost += ops.forward[b];
        // A recomputed successor no longer keeps b's output once b is rebuilt too.
        double freed_successor = 0;
        if (is(b + 1, MemoryDecision::Recompute))
          for (const OperatorTable::InEdge& in : ops.inputs[b + 1])
            if (in.from == b) freed_successor += k * in.bytes;
        consider(kept + freed_successor - rebuilt - checkpoints, cost, a, b, false);
      }
    }
    if (best_a < 0) break;
    for (int v = best_a; v <= best_b; ++v) d[v - begin] = best_is_offload ? MemoryDecision::Offload : MemoryDecision::Recompute;
    if (best_is_offload) offloaded += ops.saved[best_a];
    deficit -= best_gain;
  }
  plan = evaluate_stage_memory(ops, begin, end, context, d);
  plan.exact = false;
  return plan;
}

// ---- exact ----

struct Point {
  double memory;  // accumulated, fixed part included, offloaded bytes excluded (they depend on the total)
  double recompute;
  double offload;
  int parent;  // index into the arena, -1 at the start
  MemoryDecision decision;
};

double objective(const Point& p, const StageContext& context) { return p.recompute + offload_penalty(p.offload, context); }

// Removes points another point of the same set dominates (no more memory, recompute time and
// offload bytes); sorts by memory.
void keep_pareto(std::vector<int>& set, const std::vector<Point>& arena) {
  std::sort(set.begin(), set.end(), [&](int a, int b) {
    const Point &p = arena[a], &q = arena[b];
    if (p.memory != q.memory) return p.memory < q.memory;
    if (p.recompute != q.recompute) return p.recompute < q.recompute;
    return p.offload < q.offload;
  });
  // Staircase of the points kept so far (all with no more memory): recompute time -> least offload
  // bytes, offload strictly falling as recompute rises. A point is dominated when the step at or left
  // of its recompute time offloads no more than it does.
  std::map<double, double> stairs;
  std::vector<int> kept;
  for (int i : set) {
    const Point& p = arena[i];
    auto after = stairs.upper_bound(p.recompute);
    if (after != stairs.begin() && std::prev(after)->second <= p.offload) continue;
    kept.push_back(i);
    while (after != stairs.end() && after->second >= p.offload) after = stairs.erase(after);
    stairs[p.recompute] = p.offload;
  }
  set.swap(kept);
}

constexpr size_t kMaxParetoPoints = 4096;

StageMemoryPlan solve_exact(const OperatorTable& ops, int begin, int end, const StageContext& context) {
  const int n = end - begin;
  const double k = context.in_flight;
  const Fixed fixed = fixed_memory(ops, begin, end, context);
  // A feasible answer bounds the objective; the least memory each remaining operator can add bounds
  // the memory (charges of recomputed operators are at least zero).
  const StageMemoryPlan greedy = solve_greedy(ops, begin, end, context);
  const double bound = greedy.fits ? greedy.added_time() : kInfinity;
  std::vector<double> least_rest(n + 1, 0);
  for (int v = end - 1; v >= begin; --v) {
    double least = k * ops.saved[v];
    if (context.allow_recompute) least = std::min(least, ops.saved[v]);
    if (can_offload(ops, v, context)) least = std::min(least, ops.saved[v]);  // at least one copy
    least_rest[v - begin] = least_rest[v - begin + 1] + least;
  }

  bool exact = true;
  std::vector<Point> arena;
  arena.push_back({fixed.static_memory + fixed.workspace, 0, 0, -1, MemoryDecision::Keep});
  std::vector<int> sets[2] = {{0}, {}};  // by whether the last operator is recomputed
  for (int v = begin; v < end; ++v) {
    std::vector<int> next[2];
    const double rest = least_rest[v - begin + 1];
    for (int previous = 0; previous < 2; ++previous)
      for (int from : sets[previous]) {
        const Point base = arena[from];
        auto push = [&](double memory, double recompute, double offload, MemoryDecision decision, int recomputed) {
          const Point p{memory, recompute, offload, from, decision};
          if (memory + offload + rest > context.budget * (1 + 1e-12)) return;
          if (objective(p, context) > bound * (1 + 1e-12) + 1e-300) return;
          arena.push_back(p);
          next[recomputed].push_back(static_cast<int>(arena.size()) - 1);
        };
        push(base.memory + k * ops.saved[v], base.recompute, base.offload, MemoryDecision::Keep, 0);
        if (context.allow_recompute)
          push(base.memory + ops.saved[v] + k * checkpoint_bytes(ops, begin, v, previous == 1),
               base.recompute + ops.forward[v], base.offload, MemoryDecision::Recompute, 1);
        if (can_offload(ops, v, context))
          push(base.memory, base.recompute, base.offload + ops.saved[v], MemoryDecision::Offload, 0);
      }
    for (int r = 0; r < 2; ++r) {
      keep_pareto(next[r], arena);
      if (next[r].size() > kMaxParetoPoints) {
        exact = false;
        std::stable_sort(next[r].begin(), next[r].end(),
                         [&](int a, int b) { return objective(arena[a], context) < objective(arena[b], context); });
        next[r].resize(kMaxParetoPoints);
      }
      sets[r].swap(next[r]);
    }
  }
  int best = -1;
  for (int r = 0; r < 2; ++r)
    for (int i : sets[r]) {
      const Point& p = arena[i];
      if (p.memory + offloaded_held(p.offload, context) > context.budget) continue;
      if (best < 0 || objective(p, context) < objective(arena[best], context)) best = i;
    }
  if (best < 0) return greedy;  // nothing fits (the greedy's plan says by how much) or it was optimal
  std::vector<MemoryDecision> decisions(n);
  for (int i = best, v = end - 1; i > 0; i = arena[i].parent, --v) decisions[v - begin] = arena[i].decision;
  StageMemoryPlan plan = evaluate_stage_memory(ops, begin, end, context, decisions);
  if (greedy.fits && greedy.added_time() < plan.added_time()) plan = greedy;  // rounding ties
  plan.exact = exact;
  return plan;
}

}  // namespace

StageMemoryPlan least_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& context) {
  const int n = end - begin;
  const double k = context.in_flight, o = std::min(context.in_flight, 3);  // o: copies when transfers are fast
  // best[r]: least activation bytes so far with the last operator recomputed (r = 1) or not.
  double best[2] = {0, kInfinity};
  std::vector<std::array<std::pair<MemoryDecision, int>, 2>> choice(n);
  for (int v = begin; v < end; ++v) {
    double next[2] = {kInfinity, kInfinity};
    for (int previous = 0; previous < 2; ++previous) {
      if (best[previous] == kInfinity) continue;
      auto offer = [&](double bytes, MemoryDecision decision, int r) {
        if (best[previous] + bytes < next[r]) {
          next[r] = best[previous] + bytes;
          choice[v - begin][r] = {decision, previous};
        }
      };
      offer(k * ops.saved[v], MemoryDecision::Keep, 0);
      if (context.allow_recompute)
        offer(ops.saved[v] + k * checkpoint_bytes(ops, begin, v, previous == 1), MemoryDecision::Recompute, 1);
      if (can_offload(ops, v, context)) offer(o * ops.saved[v], MemoryDecision::Offload, 0);
    }
    best[0] = next[0], best[1] = next[1];
  }
  std::vector<MemoryDecision> decisions(n, MemoryDecision::Keep);
  int r = best[1] < best[0] ? 1 : 0;
  for (int v = end - 1; v >= begin; --v) {
    decisions[v - begin] = choice[v - begin][r].first;
    r = choice[v - begin][r].second;
  }
  return evaluate_stage_memory(ops, begin, end, context, decisions);
}

StageMemoryPlan evaluate_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& context,
                                      const std::vector<MemoryDecision>& decisions) {
  if (begin < 0 || end > ops.size() || begin > end)
    throw Error(fmt::format("operator range [{}, {}) outside the graph's {} operators", begin, end, ops.size()));
  if (static_cast<int>(decisions.size()) != end - begin)
    throw Error(fmt::format("{} memory decisions for a stage of {} operators", decisions.size(), end - begin));
  const double k = context.in_flight;
  const Fixed fixed = fixed_memory(ops, begin, end, context);
  StageMemoryPlan plan;
  plan.decisions = decisions;
  plan.static_memory = fixed.static_memory;
  double kept = 0, rebuilt = 0, offloaded = 0, checkpoints = 0;
  for (int v = begin; v < end; ++v) {
    switch (decisions[v - begin]) {
      case MemoryDecision::Keep: kept += ops.saved[v]; break;
      case MemoryDecision::Offload: offloaded += ops.saved[v]; break;
      case MemoryDecision::Recompute: {
        const bool chained = v > begin && decisions[v - 1 - begin] == MemoryDecision::Recompute;
        rebuilt += ops.saved[v];
        checkpoints += checkpoint_bytes(ops, begin, v, chained);
        plan.recompute_time += ops.forward[v];
        break;
      }
    }
  }
  plan.activation_memory = k * (kept + checkpoints) + rebuilt + offloaded_held(offloaded, context);
  plan.memory = fixed.static_memory + fixed.workspace + plan.activation_memory;
  plan.offload_bytes = offloaded;
  plan.offload_time = offload_penalty(offloaded, context);
  plan.fits = plan.memory <= context.budget && plan.offload_time < kInfinity;
  return plan;
}

StageMemoryPlan optimize_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& context,
                                      MemorySolver solver) {
  if (solver == MemorySolver::Auto)
    solver = end - begin <= kExactSolverOperators ? MemorySolver::Exact : MemorySolver::Greedy;
  StageMemoryPlan plan = solver == MemorySolver::Exact ? solve_exact(ops, begin, end, context)
                                                        : solve_greedy(ops, begin, end, context);
  if (!plan.fits) {
    // The greedy can miss a fit the least-memory decisions reach: then those are the answer.
    StageMemoryPlan least = least_stage_memory(ops, begin, end, context);
    least.exact = plan.exact && !least.fits;
    return least;
  }
  return plan;
}

}  // namespace flexpipe
