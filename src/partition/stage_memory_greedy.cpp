// The greedy stage memory solver: free offloads, then recompute chains and paid offloads by bytes saved per time added.
#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "stage_memory_solvers.h"
#include "stage_memory_terms.h"

namespace flexpipe::partition {

namespace {

// checkpoint_bytes without looking for tensors the segment already reads: an upper bound in O(inputs),
// for the greedy's inner loop (it measures its deficit exactly before each move).
double checkpoint_bound(const OperatorTable& ops, int v, int segment_start) {
  double bytes = 0;
  for (const OperatorTable::InEdge& in : ops.inputs[v])
    if (in.from < segment_start) bytes += ops.output.empty() ? in.bytes : std::min(ops.output[in.from], in.bytes);
  return bytes;
}

// Decisions over the stage's operators [begin, end) as the greedy makes them.
struct GreedyState {
  const OperatorTable& ops;
  int begin, end;
  const StageContext& context;
  std::vector<MemoryDecision> d;
  double offloaded = 0;  // saved bytes decided Offload so far

  bool is(int v, MemoryDecision m) const { return v >= begin && v < end && d[v - begin] == m; }
  // Whether a recomputed v continues the segment of a recomputed v - 1.
  bool continues(int v) const { return continues_segment(ops, begin, v, is(v - 1, MemoryDecision::Recompute)); }
  // The saved tensors of v+1 that are v's too: held once while both keep or rebuild them together.
  double shared_with_next(int v) const { return v + 1 < end ? ops.shared_in_stage(begin, v + 1) : 0; }
  // What v's decision m holds that no neighbour deciding the same holds too.
  double held_alone(int v, MemoryDecision m) const {
    return (is(v - 1, m) ? ops.saved_once(begin, v) : ops.saved[v]) - (is(v + 1, m) ? shared_with_next(v) : 0);
  }
  StageMemoryPlan evaluate() const { return evaluate_stage_memory(ops, begin, end, context, d); }
};

// Offloads whose transfer the compute hides cost nothing: takes them, largest first, while the
// deficit lasts. Returns what is left of it.
double take_hidden_offloads(GreedyState& s, double deficit) {
  if (!(s.context.host_bandwidth > 0 && s.context.allow_offload)) return deficit;
  const double k = s.context.in_flight;
  std::vector<int> order;
  for (int v = s.begin; v < s.end; ++v)
    if (can_offload(s.ops, v, s.context)) order.push_back(v);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return s.ops.saved[a] > s.ops.saved[b]; });
  const bool sharing = !s.ops.shared.empty();
  for (int v : order) {
    if (deficit <= 0) break;
    const double bytes = sharing ? s.held_alone(v, MemoryDecision::Offload) : s.ops.saved[v];
    const double kept = sharing ? s.held_alone(v, MemoryDecision::Keep) : s.ops.saved[v];
    const double gain =
        k * kept - (offloaded_held(s.offloaded + bytes, s.context) - offloaded_held(s.offloaded, s.context));
    if (offload_penalty(s.offloaded + bytes, s.context) > 0 || gain <= 0) continue;
    s.d[v - s.begin] = MemoryDecision::Offload;
    s.offloaded += bytes;
    deficit -= gain;
  }
  return deficit;
}

// The recompute segments as they stand: bytes from each one's start through v (into) and from v
// through its end (from), to price what a move adds to the largest one.
struct SegmentProfile {
  std::vector<double> into, from;
  std::vector<int> start;
  double largest = 0;
};

SegmentProfile profile_segments(const GreedyState& s) {
  const int n = s.end - s.begin;
  SegmentProfile p{std::vector<double>(n, 0), std::vector<double>(n, 0), std::vector<int>(n, 0), 0};
  for (int v = s.begin; v < s.end; ++v) {
    if (!s.is(v, MemoryDecision::Recompute)) continue;
    const int i = v - s.begin;
    const bool continues = s.continues(v);
    p.start[i] = continues ? p.start[i - 1] : v;
    p.into[i] = continues ? p.into[i - 1] + s.ops.saved_once(s.begin, v) : s.ops.saved[v];
    p.largest = std::max(p.largest, p.into[i]);
  }
  for (int v = s.end - 1; v >= s.begin; --v)
    if (s.is(v, MemoryDecision::Recompute))
      p.from[v - s.begin] = s.ops.saved[v] + (s.is(v + 1, MemoryDecision::Recompute) && s.continues(v + 1)
                                                  ? p.from[v + 1 - s.begin] - s.shared_with_next(v)
                                                  : 0);
  return p;
}

// One greedy move: operators [a, b] all recomputed, or a alone offloaded.
struct GreedyMove {
  int a = -1, b = -1;
  bool offload = false;
  double gain = 0;  // bytes it saves, as priced locally
};

// The best move: the cheapest that closes the deficit, else the most bytes per time unit. When no
// move saves anything (the first recomputed segment at k = 1 rebuilds what it stops keeping), the
// climb: the recompute chain that would save most per time once the largest segment is paid for,
// which later chains then save against. None (a < 0) when nothing is left to try.
// Instantiated without sharing too: where no operator shares saved tensors (most graphs) the shared
// terms vanish from the partitioner's hottest loop.
template <bool Sharing>
GreedyMove best_move_of(const GreedyState& s, double deficit) {
  constexpr int kLongestChain = 24;
  const OperatorTable& ops = s.ops;
  const StageContext& context = s.context;
  const double k = context.in_flight;
  GreedyMove best, climb;
  double best_cost = kInfinity, best_ratio = 0, climb_ratio = 0;
  bool best_closes = false;
  // Inlined: it runs for every chain the inner loop prices (the partitioner's hot path).
  auto consider = [&](double gain, double cost, int a, int b, bool offload, double rebuilt = 0)
      __attribute__((always_inline)) {
    if (gain <= 0) {
      if (offload || gain + rebuilt <= 0 || cost <= 0) return;
      const double ratio = (gain + rebuilt) / cost;
      if (ratio > climb_ratio) climb_ratio = ratio, climb = {a, b, false, gain};
      return;
    }
    const bool closes = gain >= deficit;
    const double ratio = cost > 0 ? gain / cost : kInfinity;
    const bool better = closes ? (!best_closes || cost < best_cost) : (!best_closes && ratio > best_ratio);
    if (!better) return;
    best_cost = cost, best_ratio = ratio, best_closes = closes;
    best = {a, b, offload, gain};
  };
  const double penalty_now = offload_penalty(s.offloaded, context);
  // Per checkpoint byte: k copies kept, or the offloaded copies at today's transfer volume.
  const double checkpoint_copies =
      context.offload_checkpoints ? offload_copies(std::max(s.offloaded, 1.0), context) : k;
  const SegmentProfile segments = profile_segments(s);
  for (int a = s.begin; a < s.end; ++a) {
    if (!s.is(a, MemoryDecision::Keep)) continue;
    if (can_offload(ops, a, context)) {
      const double moved = Sharing ? s.held_alone(a, MemoryDecision::Offload) : ops.saved[a];
      consider(k * (Sharing ? s.held_alone(a, MemoryDecision::Keep) : ops.saved[a]) -
                   (offloaded_held(s.offloaded + moved, context) - offloaded_held(s.offloaded, context)),
               offload_penalty(s.offloaded + moved, context) - penalty_now, a, a, true);
    }
    if (!context.allow_recompute) continue;
    // A chain stays within a's layer: a longer one is two segments, i.e. two moves.
    const bool joins_left = s.continues(a);
    const double left = joins_left ? segments.into[a - 1 - s.begin] : 0;
    const int start = joins_left ? segments.start[a - 1 - s.begin] : a;
    double kept = 0, chain = 0, checkpoints = 0, compute = 0, moved = 0;
    for (int b = a;
         b < s.end && b < a + kLongestChain && s.is(b, MemoryDecision::Keep) && (b == a || ops.same_layer(b - 1, b));
         ++b) {
      // What b holds besides a predecessor kept (before the move) or rebuilt with it (after).
      const double shared = Sharing ? ops.shared_in_stage(s.begin, b) : 0;
      const double shared_next = Sharing ? s.shared_with_next(b) : 0;
      kept += k * (ops.saved[b] - (b > a || s.is(a - 1, MemoryDecision::Keep) ? shared : 0));
      chain += ops.saved[b] - (b > a || joins_left ? shared : 0);
      const double read = checkpoint_bound(ops, b, start);
      checkpoints += checkpoint_copies * read;
      if (context.offload_checkpoints) moved += read;
      compute += ops.forward[b];
      const double cost = compute + (moved > 0 ? offload_penalty(s.offloaded + moved, context) - penalty_now : 0);
      // A recomputed successor in the same layer no longer keeps b's output once b is rebuilt too.
      const bool joins_right = s.is(b + 1, MemoryDecision::Recompute) && continues_segment(ops, s.begin, b + 1, true);
      double freed_successor = 0;
      if (joins_right)
        for (const OperatorTable::InEdge& in : ops.inputs[b + 1])
          if (in.from == b) freed_successor += k * in.bytes;
      const double merged = left + chain + (joins_right ? segments.from[b + 1 - s.begin] - shared_next : 0);
      const double rebuilt = context.split_backward ? chain : std::max(0.0, merged - segments.largest);
      // A kept successor no longer shares what b saved.
      const double unshared = s.is(b + 1, MemoryDecision::Keep) ? k * shared_next : 0;
      consider(kept + freed_successor - unshared - rebuilt - checkpoints, cost, a, b, false, rebuilt);
    }
  }
  return best.a >= 0 ? best : climb;
}

GreedyMove best_move(const GreedyState& s, double deficit) {
  return s.ops.shared.empty() ? best_move_of<false>(s, deficit) : best_move_of<true>(s, deficit);
}

// Moves chosen early can be made redundant by later, larger ones: gives back the segments whose
// recompute the fit no longer needs, the most expensive first.
void give_back_redundant_segments(GreedyState& s, StageMemoryPlan& plan) {
  std::vector<std::pair<double, int>> segments;  // (recompute time, first operator)
  for (int v = s.begin; v < s.end;) {
    if (!s.is(v, MemoryDecision::Recompute)) {
      ++v;
      continue;
    }
    double time = 0;
    int w = v;
    do time += s.ops.forward[w++];
    while (w < s.end && s.is(w, MemoryDecision::Recompute) && continues_segment(s.ops, s.begin, w, true));
    segments.emplace_back(time, v);
    v = w;
  }
  std::sort(segments.begin(), segments.end(), std::greater<>());
  for (const auto& [time, first] : segments) {
    GreedyState trial = s;
    for (int w = first; w < s.end && trial.is(w, MemoryDecision::Recompute) &&
                        (w == first || continues_segment(s.ops, s.begin, w, true));
         ++w)
      trial.d[w - s.begin] = MemoryDecision::Keep;
    const StageMemoryPlan kept = trial.evaluate();
    if (kept.fits) s.d = std::move(trial.d), plan = kept;
  }
}

}  // namespace

StageMemoryPlan solve_greedy(const OperatorTable& ops, int begin, int end, const StageContext& context) {
  GreedyState s{ops, begin, end, context, std::vector<MemoryDecision>(end - begin, MemoryDecision::Keep)};
  StageMemoryPlan plan = s.evaluate();
  double deficit = plan.memory - context.budget;
  if (deficit <= 0) return plan;
  deficit = take_hidden_offloads(s, deficit);
  while (deficit > 0) {
    // A move's gain is priced locally (merging segments also frees checkpoints further on), so the
    // deficit is measured afresh before each move.
    const StageMemoryPlan now = s.evaluate();
    deficit = now.memory - context.budget;
    if (deficit <= 0) break;
    if (context.stopped()) {  // out of time: unfinished; the caller falls back to the least memory
      StageMemoryPlan unfinished = now;
      unfinished.fits = false;
      unfinished.exact = false;
      return unfinished;
    }
    s.offloaded = now.offload_bytes;  // offloaded checkpoints included
    const GreedyMove move = best_move(s, deficit);
    if (move.a < 0) break;
    for (int v = move.a; v <= move.b; ++v)
      s.d[v - begin] = move.offload ? MemoryDecision::Offload : MemoryDecision::Recompute;
    deficit -= move.gain;
  }
  plan = s.evaluate();
  if (plan.fits) give_back_redundant_segments(s, plan);
  plan.exact = false;
  return plan;
}

}  // namespace flexpipe::partition
