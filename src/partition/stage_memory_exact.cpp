// The exact stage memory programs: the dynamic program over Pareto sets, and the least-memory program.
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "stage_memory_solvers.h"
#include "stage_memory_terms.h"

namespace flexpipe::partition {

namespace {

// A partial assignment of the operators so far. Its memory at the end is memory + largest plus the
// offloaded copies; largest may still grow while the open segment does.
struct Point {
  double memory;   // fixed part, k * (kept + checkpoints), and every rebuilt byte when the backward is split
  double largest;  // the largest recompute segment so far, the open one included (whole backward only)
  double open;     // the open segment's bytes when the last operator is recomputed (whole backward only)
  int start;       // the open segment's first operator, -1 when none: later checkpoints depend on it
  double recompute;
  double offload;  // bytes; their copies depend on the total, so they are charged at the end
  int parent;      // index into the arena, -1 at the start
  MemoryDecision decision;
  // Whether the assignment recomputes anything, tracked where checkpoints are offloaded: without a
  // recompute there is nothing to reload right before R, and the plan runs as plain offloading.
  bool recomputed = true;
};

double objective(const Point& p, const StageContext& context) {
  return p.recompute + offload_penalty(p.offload, context);
}

// Whatever the remaining operators decide, both points pay the same for it, and then p is never worse
// than q. Final memory is memory + max(largest, S) for the largest segment S still to come (S grows
// with open), which is no more for p at every S when p holds no more now (memory + largest) and no
// more besides its segments (memory).
// A point that has not recomputed yet does not dominate one that has: it may not end as it does.
bool dominates(const Point& p, const Point& q) {
  return p.start == q.start && p.recomputed >= q.recomputed && p.memory <= q.memory &&
         p.memory + p.largest <= q.memory + q.largest && p.open <= q.open && p.recompute <= q.recompute &&
         p.offload <= q.offload;
}

// Removes points another point of the same set dominates; sorts by the memory they hold so far.
void keep_pareto(std::vector<int>& set, const std::vector<Point>& arena) {
  auto key = [&](int i) {
    const Point& p = arena[i];
    return std::array<double, 8>{double(p.start),
                                 p.recomputed ? 0.0 : 1.0,
                                 p.memory + p.largest,
                                 p.memory,
                                 p.largest,
                                 p.open,
                                 p.recompute,
                                 p.offload};
  };
  // Only points of one open segment compare; within one, lexicographic order puts every dominating
  // point before the points it dominates.
  std::sort(set.begin(), set.end(), [&](int a, int b) { return key(a) < key(b); });
  std::vector<int> kept;
  size_t group = 0;  // where the kept points of the current segment start begin
  for (int i : set) {
    if (!kept.empty() && arena[kept.back()].start != arena[i].start) group = kept.size();
    if (std::none_of(kept.begin() + group, kept.end(), [&](int j) { return dominates(arena[j], arena[i]); }))
      kept.push_back(i);
  }
  set.swap(kept);
}

// The dynamic programs' Pareto sets, by how the last operator holds what it saves: points that differ
// there differ in what the next operator adds. Offloaded points join the kept ones unless the next
// operator shares saved tensors with the last (then only keeping both holds them once).
constexpr int kKeptSet = 0, kRecomputedSet = 1, kOffloadedSet = 2, kSets = 3;

// What keeping or offloading v adds per micro-batch after the point `base`: its saved bytes, less
// those a predecessor that decided the same already holds.
double held_bytes(const OperatorTable& ops, int begin, int v, const Point& base, MemoryDecision decision) {
  return base.decision == decision ? ops.saved_once(begin, v) : ops.saved[v];
}

// A kept or offloaded operator closes any open segment and adds `memory` bytes held on the device
// and `offload` bytes whose copies are charged at the end.
Point closed_step(const Point& base, double memory, double offload, MemoryDecision decision) {
  Point p = base;
  p.memory += memory;
  p.offload += offload;
  p.open = 0;
  p.start = -1;
  p.decision = decision;
  return p;
}

// The two ways a recomputed operator v adds to a point: its checkpoints k times, and its saved bytes
// either to every rebuilt byte (split backward) or to the open segment.
Point recompute_step(const OperatorTable& ops, const StageInputs& inputs, int v, const StageContext& context,
                     const Point& base, bool previous_recomputed) {
  const int begin = inputs.begin;
  const bool continues = continues_segment(ops, begin, v, previous_recomputed);
  Point p = base;
  p.start = continues ? base.start : v;
  add_checkpoints(checkpoint_bytes(ops, inputs, v, p.start), context, p.memory, p.offload);
  const double bytes =
      std::max(0.0, (continues ? ops.saved_once(begin, v) : ops.saved[v]) - checkpointed_saved(ops, v, p.start));
  if (context.split_backward) {
    p.memory += bytes;
  } else {
    p.open = (continues ? base.open : 0) + bytes;
    p.largest = std::max(base.largest, p.open);
  }
  p.recompute += ops.forward[v];
  p.decision = MemoryDecision::Recompute;
  p.recomputed = true;
  return p;
}

// The ways operator v extends the point `base` of Pareto set `base_set`: kept, recomputed where
// allowed, offloaded where it can be; `push(point, set)` receives each with the set it joins.
// Operators up to end are the range the program walks; inputs.begin is the stage's first.
template <class Push>
void extend(const OperatorTable& ops, const StageInputs& inputs, int end, int v, const StageContext& context,
            const Point& base, int base_set, Push&& push) {
  const int begin = inputs.begin;
  push(closed_step(base, context.in_flight * held_bytes(ops, begin, v, base, MemoryDecision::Keep), 0,
                   MemoryDecision::Keep),
       kKeptSet);
  if (context.allow_recompute)
    push(recompute_step(ops, inputs, v, context, base, base_set == kRecomputedSet), kRecomputedSet);
  if (can_offload(ops, v, context)) {
    const bool next_shares = v + 1 < end && ops.shared_in_stage(begin, v + 1) > 0;
    push(closed_step(base, 0, held_bytes(ops, begin, v, base, MemoryDecision::Offload), MemoryDecision::Offload),
         next_shares ? kOffloadedSet : kKeptSet);
  }
}

}  // namespace

StageMemoryPlan solve_exact(const OperatorTable& ops, int begin, int end, const StageContext& context,
                            size_t max_points) {
  const int n = end - begin;
  const double k = context.in_flight;
  const FixedMemory fixed = fixed_memory(ops, begin, end, context);
  const StageInputs inputs = stage_inputs(ops, begin, end);
  // A feasible answer bounds the objective; the least memory each remaining operator can add bounds
  // the memory (a recomputed operator adds at least nothing to k * kept, and one copy when split).
  // With checkpoints offloaded only assignments that recompute count (the others are plain
  // offloading, which the caller solves as such): the greedy bounds the time only where it is one.
  const StageMemoryPlan greedy = solve_greedy(ops, begin, end, context);
  const bool greedy_counts =
      greedy.fits && (!context.offload_checkpoints || std::find(greedy.decisions.begin(), greedy.decisions.end(),
                                                                MemoryDecision::Recompute) != greedy.decisions.end());
  const double bound = greedy_counts ? greedy.added_time() : kInfinity;
  std::vector<double> least_rest(n + 1, 0);
  for (int v = end - 1; v >= begin; --v) {
    double least = k * ops.saved_once(begin, v);
    if (context.allow_recompute) least = std::min(least, context.split_backward ? ops.saved_once(begin, v) : 0.0);
    if (can_offload(ops, v, context)) least = std::min(least, ops.saved_once(begin, v));  // at least one copy
    least_rest[v - begin] = least_rest[v - begin + 1] + least;
  }

  bool exact = true;
  std::vector<Point> arena;
  arena.push_back({fixed.static_memory + fixed.workspace + k * inputs.held, 0, 0, -1, 0, 0, -1, MemoryDecision::Keep,
                   !context.offload_checkpoints});
  std::vector<int> sets[kSets] = {{0}, {}, {}};
  for (int v = begin; v < end; ++v) {
    if (context.stopped()) {  // out of time: unfinished; the caller falls back to the least memory
      StageMemoryPlan unfinished = greedy;
      unfinished.fits = false;
      unfinished.exact = false;
      return unfinished;
    }
    std::vector<int> next[kSets];
    const double rest = least_rest[v - begin + 1];
    for (int previous = 0; previous < kSets; ++previous)
      for (int from : sets[previous]) {
        const Point base = arena[from];
        auto push = [&](Point p, int set) {
          p.parent = from;
          if (p.memory + p.largest + p.offload + rest > context.budget * (1 + 1e-12)) return;
          if (objective(p, context) > bound * (1 + 1e-12) + 1e-300) return;
          arena.push_back(p);
          next[set].push_back(static_cast<int>(arena.size()) - 1);
        };
        extend(ops, inputs, end, v, context, base, previous, push);
      }
    for (int r = 0; r < kSets; ++r) {
      keep_pareto(next[r], arena);
      if (next[r].size() > max_points) {
        exact = false;
        std::stable_sort(next[r].begin(), next[r].end(),
                         [&](int a, int b) { return objective(arena[a], context) < objective(arena[b], context); });
        next[r].resize(max_points);
      }
      sets[r].swap(next[r]);
    }
  }
  int best = -1;
  for (int r = 0; r < kSets; ++r)
    for (int i : sets[r]) {
      const Point& p = arena[i];
      if (!p.recomputed) continue;
      if (p.memory + p.largest + offloaded_held(p.offload, context, p.largest) > context.budget) continue;
      if (best < 0 || objective(p, context) < objective(arena[best], context)) best = i;
    }
  if (best < 0) return greedy;  // nothing fits (the greedy's plan says by how much) or it was optimal
  std::vector<MemoryDecision> decisions(n);
  for (int i = best, v = end - 1; i > 0; i = arena[i].parent, --v) decisions[v - begin] = arena[i].decision;
  StageMemoryPlan plan = evaluate_stage_memory(ops, begin, end, context, decisions);
  if (greedy_counts && greedy.added_time() < plan.added_time()) plan = greedy;  // rounding ties
  plan.exact = exact;
  return plan;
}

namespace {

// One layer's share of a least-memory assignment: what it adds besides the largest segment, its
// largest segment, and its decisions.
struct LayerOption {
  double memory;
  double largest;
  std::vector<MemoryDecision> decisions;
};

// The Pareto options of the operators [begin, end) of one layer (or of any range whose first
// operator cannot continue a segment): fewer bytes against a smaller largest segment, ordered by
// largest segment with memory strictly falling. The exact solver's points with time ignored;
// offloaded copies are charged at once, as if transfers were fast.
std::vector<LayerOption> layer_options(const OperatorTable& ops, const StageInputs& inputs, int begin, int end,
                                       const StageContext& context) {
  const double o = std::min(context.in_flight, context.offload_checkpoints ? 1 : 3);
  thread_local std::vector<Point> arena;  // reused: the partitioner calls this for many ranges
  arena.clear();
  arena.push_back({0, 0, 0, -1, 0, 0, -1, MemoryDecision::Keep});
  std::vector<int> sets[kSets] = {{0}, {}, {}};
  for (int v = begin; v < end; ++v) {
    std::vector<int> next[kSets];
    for (int previous = 0; previous < kSets; ++previous)
      for (int from : sets[previous]) {
        const Point base = arena[from];
        auto push = [&](Point p, int set) {
          p.parent = from;
          p.memory += o * p.offload;  // what v offloads (the base point carries none), at once
          p.recompute = p.offload = 0;
          arena.push_back(p);
          next[set].push_back(static_cast<int>(arena.size()) - 1);
        };
        extend(ops, inputs, end, v, context, base, previous, push);
      }
    for (int r = 0; r < kSets; ++r) {
      keep_pareto(next[r], arena);
      if (next[r].size() > kMaxParetoPoints) next[r].resize(kMaxParetoPoints);  // the least memory so far
      sets[r].swap(next[r]);
    }
  }
  std::vector<int> ends;
  for (const std::vector<int>& set : sets) ends.insert(ends.end(), set.begin(), set.end());
  std::sort(ends.begin(), ends.end(), [&](int a, int b) {
    return std::pair(arena[a].largest, arena[a].memory) < std::pair(arena[b].largest, arena[b].memory);
  });
  std::vector<LayerOption> options;
  for (int i : ends) {
    if (!options.empty() && options.back().memory <= arena[i].memory) continue;
    LayerOption option{arena[i].memory, arena[i].largest, std::vector<MemoryDecision>(end - begin)};
    for (int j = i, v = end - 1; j > 0; j = arena[j].parent, --v) option.decisions[v - begin] = arena[j].decision;
    options.push_back(std::move(option));
  }
  return options;
}

// Whether the layers starting at a and b (n operators each) make the same least-memory choices: the
// same saved bytes and the same inputs, relative to each operator, inside or outside the stage (and
// of a received input, the same part a checkpoint may keep).
bool same_shape(const OperatorTable& ops, const StageInputs& inputs, int a, int b, int n, const StageContext& context) {
  const int stage_begin = inputs.begin;
  for (int i = 0; i < n; ++i) {
    const int u = a + i, v = b + i;
    if (ops.saved[u] != ops.saved[v] || ops.saved_once(stage_begin, u) != ops.saved_once(stage_begin, v) ||
        can_offload(ops, u, context) != can_offload(ops, v, context) || ops.inputs[u].size() != ops.inputs[v].size())
      return false;
    for (size_t j = 0; j < ops.inputs[u].size(); ++j) {
      const OperatorTable::InEdge &x = ops.inputs[u][j], &y = ops.inputs[v][j];
      if (x.bytes != y.bytes || x.saved != y.saved || x.from - u != y.from - v ||
          (x.from >= stage_begin) != (y.from >= stage_begin) ||
          (!ops.output.empty() && ops.output[x.from] != ops.output[y.from]) ||
          (x.from < stage_begin && inputs.checkpoint_limit(ops, x.from) != inputs.checkpoint_limit(ops, y.from)))
        return false;
    }
  }
  return true;
}

// Segments never span layers, so the layers of the range choose independently and meet only in the
// largest segment: for each candidate largest segment C, every layer takes its least memory with
// segments of at most C, and the best C wins.
std::vector<MemoryDecision> least_memory_decisions(const OperatorTable& ops, int begin, int end,
                                                   const StageContext& context) {
  // A model's transformer layers repeat: each distinct shape is solved once, and every layer of the
  // range points at its shape's options.
  std::vector<std::vector<LayerOption>> shapes;
  std::vector<std::pair<int, int>> shape_range;  // per shape: the first operator and size of its first layer
  std::vector<int> shape_of;                     // per layer of the range
  const StageInputs inputs = stage_inputs(ops, begin, end);
  for (int first = begin; first < end;) {
    int last = first + 1;
    while (last < end && ops.same_layer(last - 1, last)) ++last;
    const auto twin = std::find_if(shape_range.begin(), shape_range.end(), [&](const std::pair<int, int>& r) {
      return r.second == last - first && same_shape(ops, inputs, r.first, first, last - first, context);
    });
    if (twin == shape_range.end()) {
      shapes.push_back(layer_options(ops, inputs, first, last, context));
      shape_range.emplace_back(first, last - first);
      shape_of.push_back(static_cast<int>(shapes.size()) - 1);
    } else {
      shape_of.push_back(static_cast<int>(twin - shape_range.begin()));
    }
    first = last;
  }
  auto options_of = [&](size_t layer) -> const std::vector<LayerOption>& { return shapes[shape_of[layer]]; };
  // Every layer's first option has its smallest largest segment (dominance may have dropped keeping
  // everything), so no C below the largest of those (floor) is feasible. Sweep C upwards over every
  // option's largest segment.
  struct Step {
    double largest;
    int layer, option;
  };
  std::vector<Step> steps;
  std::vector<int> chosen(shape_of.size(), 0);
  double memory = 0, floor = 0;
  for (size_t l = 0; l < shape_of.size(); ++l) {
    const std::vector<LayerOption>& options = options_of(l);
    memory += options[0].memory;
    floor = std::max(floor, options[0].largest);
    for (size_t i = 1; i < options.size(); ++i)
      steps.push_back({options[i].largest, static_cast<int>(l), static_cast<int>(i)});
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.largest < b.largest; });
  std::vector<int> current = chosen;
  double best = memory + floor;
  for (size_t i = 0; i < steps.size();) {
    const double cap = steps[i].largest;
    for (; i < steps.size() && steps[i].largest == cap; ++i) {
      const Step& s = steps[i];
      memory += options_of(s.layer)[s.option].memory - options_of(s.layer)[current[s.layer]].memory;
      current[s.layer] = s.option;
    }
    // No layer's segments exceed max(cap, floor).
    const double largest = std::max(cap, floor);
    if (memory + largest < best) best = memory + largest, chosen = current;
  }
  std::vector<MemoryDecision> decisions;
  decisions.reserve(end - begin);
  for (size_t l = 0; l < shape_of.size(); ++l) {
    const LayerOption& option = options_of(l)[chosen[l]];
    decisions.insert(decisions.end(), option.decisions.begin(), option.decisions.end());
  }
  return decisions;
}

}  // namespace

StageMemoryPlan least_memory_holding_checkpoints_one_way(const OperatorTable& ops, int begin, int end,
                                                         const StageContext& context) {
  // With checkpoints offloaded, decisions that recompute nothing run as plain offloading: priced so.
  auto price = [&](const std::vector<MemoryDecision>& decisions) {
    StageContext as_run = context;
    as_run.offload_checkpoints = context.offload_checkpoints && std::find(decisions.begin(), decisions.end(),
                                                                          MemoryDecision::Recompute) != decisions.end();
    StageMemoryPlan plan = evaluate_stage_memory(ops, begin, end, as_run, decisions);
    plan.offload_checkpoints = context.offload_checkpoints;
    return plan;
  };
  const std::vector<MemoryDecision> decisions = least_memory_decisions(ops, begin, end, context);
  StageMemoryPlan plan = price(decisions);
  // The layer program charges offloaded bytes as if their copies left at once. Where the copies that
  // transfers and reloads keep on the device make offloading hold more than that (a reload right
  // before R overlaps the newest copy's offload), the least memory without offloading an operator
  // can be less: the answer is the better of the two.
  if (std::find(decisions.begin(), decisions.end(), MemoryDecision::Offload) != decisions.end()) {
    StageContext on_device = context;
    on_device.allow_offload = false;
    StageMemoryPlan without = price(least_memory_decisions(ops, begin, end, on_device));
    if (without.memory < plan.memory) plan = std::move(without);
  }
  return plan;
}

}  // namespace flexpipe::partition
