// Stage memory model and the keep / recompute / offload choice (docs/partitioner.md).
#include "flexpipe/partition/stage_memory.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

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
  ops.layer.resize(n);
  ops.output.resize(n);
  bool shares = false;
  for (int i = 0; i < n; ++i) {
    const OperatorNode& node = graph.nodes[i];
    ops.forward[i] = operator_time(graph, node, Pass::Forward, shape);
    ops.backward[i] = operator_time(graph, node, Pass::BackwardInput, shape) +
                      operator_time(graph, node, Pass::BackwardWeight, shape);
    ops.saved[i] = node.saved_bytes.at(shape.microbatch_size, shape.seq_len);
    ops.workspace[i] = node.workspace_bytes.at(shape.microbatch_size, shape.seq_len);
    ops.parameters[i] = node.parameters;
    ops.tied_to[i] = node.tied_to;
    ops.layer[i] = node.layer;
    ops.output[i] = node.output_bytes.at(shape.microbatch_size, shape.seq_len);
    shares = shares || !node.shared_saved_bytes.is_zero();
  }
  if (shares) {
    ops.shared.resize(n);
    for (int i = 0; i < n; ++i) ops.shared[i] = graph.nodes[i].shared_saved_bytes.at(shape.microbatch_size, shape.seq_len);
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

// Whether a recomputed v continues its predecessor's recompute segment. A segment is a run of
// recomputed operators within one layer: the granularity at which Megatron's full recompute
// checkpoints, so a segment never holds more than one layer's activations.
bool continues_segment(const OperatorTable& ops, int begin, int v, bool previous_recomputed) {
  return previous_recomputed && v > begin && v < ops.size() && ops.same_layer(v - 1, v);
}

// What a recomputed v adds to the checkpoints of its segment, which starts at segment_start: the
// tensors it reads that were produced before the segment, in the stage or received from an earlier
// one, each kept once per segment and at most its producer's whole output (the segment's operators
// may read slices of it). The segment rebuilds what it reads from itself.
double checkpoint_bytes(const OperatorTable& ops, int v, int segment_start) {
  double bytes = 0;
  for (const OperatorTable::InEdge& in : ops.inputs[v]) {
    if (in.from >= segment_start) continue;
    double read = 0;  // by the segment's earlier operators
    for (int u = segment_start; u < v; ++u)
      for (const OperatorTable::InEdge& earlier : ops.inputs[u])
        if (earlier.from == in.from) read += earlier.bytes;
    const double output = ops.output.empty() ? kInfinity : ops.output[in.from];
    bytes += std::min(output, read + in.bytes) - std::min(output, read);
  }
  return bytes;
}

// checkpoint_bytes without looking for tensors the segment already reads: an upper bound in O(inputs),
// for the greedy's inner loop (it measures its deficit exactly before each move).
double checkpoint_bound(const OperatorTable& ops, int v, int segment_start) {
  double bytes = 0;
  for (const OperatorTable::InEdge& in : ops.inputs[v])
    if (in.from < segment_start)
      bytes += ops.output.empty() ? in.bytes : std::min(ops.output[in.from], in.bytes);
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

// The warm-up's k forwards run back to back, one per forward time f at best. Where a transfer takes
// longer than f the copies queue on the host link: after the k-th forward, k - floor((k - 1) f / t)
// of them have not left (the one going out included). Deep pipelines (k in the tens) pile up most.
double warm_up_backlog(double t, const StageContext& context) {
  if (!(t > context.forward_time)) return 0;
  const double k = context.in_flight;
  return k - std::floor((k - 1) * context.forward_time / t + 1e-12);
}

// Copies on the device while a backward runs: the one reloaded for it, the one just made and those
// still on their way out (the transfer spans `slots` forward slots), when the reload starts a compute
// action ahead. A reload right before R (checkpoint offload) starts with the newest one's offload and
// takes as long, so R finds only transfers older than one slot still going out: `slots` copies in all.
// At the first backward, the warm-up's backlog and that backward's reload.
double offload_copies(double offload_bytes, const StageContext& context) {
  const double t = transfer_time(offload_bytes, context);
  const double slots = std::max(1.0, std::ceil(t / forward_slot(context) - 1e-12));
  const double steady = context.offload_checkpoints ? slots : 2 + slots;
  return std::min<double>(context.in_flight, std::max(steady, 1 + warm_up_backlog(t, context)));
}

// The context with the stage's forward time where the caller left it out.
StageContext with_forward_time(const OperatorTable& ops, int begin, int end, StageContext context) {
  if (context.forward_time < 0) {
    context.forward_time = 0;
    for (int v = begin; v < end; ++v) context.forward_time += ops.forward[v];
  }
  return context;
}

// The offloaded bytes' share of the peak. `rebuilt`: what the backward rebuilds besides (0 when not
// known). With a reload right before R, while R waits the micro-batch's data comes in as the newest
// one's goes out: two copies and nothing rebuilt yet.
double offloaded_held(double offload_bytes, const StageContext& context, double rebuilt = 0) {
  if (offload_bytes <= 0) return 0;
  const double held = offload_copies(offload_bytes, context) * offload_bytes;
  if (!context.offload_checkpoints) return held;
  return std::max(held, std::min(context.in_flight, 2) * offload_bytes - rebuilt);
}

// The reload starts one compute action (about a forward slot) ahead of the backward; the backward
// waits for whatever of the transfer is left. Right before R, it waits for all of it.
double offload_penalty(double offload_bytes, const StageContext& context) {
  if (offload_bytes <= 0) return 0;
  if (context.host_bandwidth <= 0) return kInfinity;
  const double t = transfer_time(offload_bytes, context);
  return context.offload_checkpoints ? t : std::max(0.0, t - forward_slot(context));
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

// Offloading keeps at least 3 copies on the device (1 with a reload right before R): it pays only
// with more micro-batches in flight.
bool can_offload(const OperatorTable& ops, int v, const StageContext& context) {
  const int least_in_flight = context.offload_checkpoints ? 2 : 4;
  return context.allow_offload && context.host_bandwidth > 0 && context.in_flight >= least_in_flight && ops.saved[v] > 0;
}

// Where the checkpoints of a recomputed operator go: k copies on the device, or offloaded bytes.
void add_checkpoints(double bytes, const StageContext& context, double& memory, double& offload) {
  if (context.offload_checkpoints) offload += bytes;
  else memory += context.in_flight * bytes;
}

// ---- greedy ----

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
    const double gain = k * kept - (offloaded_held(s.offloaded + bytes, s.context) - offloaded_held(s.offloaded, s.context));
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
  auto consider = [&](double gain, double cost, int a, int b, bool offload,
                      double rebuilt = 0) __attribute__((always_inline)) {
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
    for (int b = a; b < s.end && b < a + kLongestChain && s.is(b, MemoryDecision::Keep) && (b == a || ops.same_layer(b - 1, b));
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
    s.offloaded = now.offload_bytes;  // offloaded checkpoints included
    const GreedyMove move = best_move(s, deficit);
    if (move.a < 0) break;
    for (int v = move.a; v <= move.b; ++v) s.d[v - begin] = move.offload ? MemoryDecision::Offload : MemoryDecision::Recompute;
    deficit -= move.gain;
  }
  plan = s.evaluate();
  if (plan.fits) give_back_redundant_segments(s, plan);
  plan.exact = false;
  return plan;
}

// ---- exact ----

// A partial assignment of the operators so far. Its memory at the end is memory + largest plus the
// offloaded copies; largest may still grow while the open segment does.
struct Point {
  double memory;     // fixed part, k * (kept + checkpoints), and every rebuilt byte when the backward is split
  double largest;    // the largest recompute segment so far, the open one included (whole backward only)
  double open;       // the open segment's bytes when the last operator is recomputed (whole backward only)
  int start;         // the open segment's first operator, -1 when none: later checkpoints depend on it
  double recompute;
  double offload;    // bytes; their copies depend on the total, so they are charged at the end
  int parent;        // index into the arena, -1 at the start
  MemoryDecision decision;
};

double objective(const Point& p, const StageContext& context) { return p.recompute + offload_penalty(p.offload, context); }

// Whatever the remaining operators decide, both points pay the same for it, and then p is never worse
// than q. Final memory is memory + max(largest, S) for the largest segment S still to come (S grows
// with open), which is no more for p at every S when p holds no more now (memory + largest) and no
// more besides its segments (memory).
bool dominates(const Point& p, const Point& q) {
  return p.start == q.start && p.memory <= q.memory && p.memory + p.largest <= q.memory + q.largest && p.open <= q.open &&
         p.recompute <= q.recompute && p.offload <= q.offload;
}

// Removes points another point of the same set dominates; sorts by the memory they hold so far.
void keep_pareto(std::vector<int>& set, const std::vector<Point>& arena) {
  auto key = [&](int i) {
    const Point& p = arena[i];
    return std::array<double, 7>{double(p.start), p.memory + p.largest, p.memory, p.largest, p.open, p.recompute, p.offload};
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

// Points per Pareto set: the exact solver's proof keeps up to kMaxParetoPoints; `auto` caps its
// sets at kAutoParetoPoints (the cheapest in time kept), trading the proof for time, since a tight
// budget grows them fast and the search calls the solver thousands of times.
constexpr size_t kMaxParetoPoints = 4096;
constexpr size_t kAutoParetoPoints = 64;

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
Point recompute_step(const OperatorTable& ops, int begin, int v, const StageContext& context, const Point& base,
                     bool previous_recomputed) {
  const bool continues = continues_segment(ops, begin, v, previous_recomputed);
  Point p = base;
  p.start = continues ? base.start : v;
  add_checkpoints(checkpoint_bytes(ops, v, p.start), context, p.memory, p.offload);
  const double bytes = continues ? ops.saved_once(begin, v) : ops.saved[v];
  if (context.split_backward) {
    p.memory += bytes;
  } else {
    p.open = (continues ? base.open : 0) + bytes;
    p.largest = std::max(base.largest, p.open);
  }
  p.recompute += ops.forward[v];
  p.decision = MemoryDecision::Recompute;
  return p;
}

// The ways operator v extends the point `base` of Pareto set `base_set`: kept, recomputed where
// allowed, offloaded where it can be; `push(point, set)` receives each with the set it joins.
// Operators [begin, end) are the range the program walks; begin is the stage's first.
template <class Push>
void extend(const OperatorTable& ops, int begin, int end, int v, const StageContext& context, const Point& base,
            int base_set, Push&& push) {
  push(closed_step(base, context.in_flight * held_bytes(ops, begin, v, base, MemoryDecision::Keep), 0,
                   MemoryDecision::Keep),
       kKeptSet);
  if (context.allow_recompute)
    push(recompute_step(ops, begin, v, context, base, base_set == kRecomputedSet), kRecomputedSet);
  if (can_offload(ops, v, context)) {
    const bool next_shares = v + 1 < end && ops.shared_in_stage(begin, v + 1) > 0;
    push(closed_step(base, 0, held_bytes(ops, begin, v, base, MemoryDecision::Offload), MemoryDecision::Offload),
         next_shares ? kOffloadedSet : kKeptSet);
  }
}

StageMemoryPlan solve_exact(const OperatorTable& ops, int begin, int end, const StageContext& context,
                            size_t max_points) {
  const int n = end - begin;
  const double k = context.in_flight;
  const Fixed fixed = fixed_memory(ops, begin, end, context);
  // A feasible answer bounds the objective; the least memory each remaining operator can add bounds
  // the memory (a recomputed operator adds at least nothing to k * kept, and one copy when split).
  const StageMemoryPlan greedy = solve_greedy(ops, begin, end, context);
  const double bound = greedy.fits ? greedy.added_time() : kInfinity;
  std::vector<double> least_rest(n + 1, 0);
  for (int v = end - 1; v >= begin; --v) {
    double least = k * ops.saved_once(begin, v);
    if (context.allow_recompute) least = std::min(least, context.split_backward ? ops.saved_once(begin, v) : 0.0);
    if (can_offload(ops, v, context)) least = std::min(least, ops.saved_once(begin, v));  // at least one copy
    least_rest[v - begin] = least_rest[v - begin + 1] + least;
  }

  bool exact = true;
  std::vector<Point> arena;
  arena.push_back({fixed.static_memory + fixed.workspace, 0, 0, -1, 0, 0, -1, MemoryDecision::Keep});
  std::vector<int> sets[kSets] = {{0}, {}, {}};
  for (int v = begin; v < end; ++v) {
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
        extend(ops, begin, end, v, context, base, previous, push);
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
      if (p.memory + p.largest + offloaded_held(p.offload, context, p.largest) > context.budget) continue;
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
std::vector<LayerOption> layer_options(const OperatorTable& ops, int stage_begin, int begin, int end,
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
        extend(ops, stage_begin, end, v, context, base, previous, push);
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
// same saved bytes and the same inputs, relative to each operator, inside or outside the stage.
bool same_shape(const OperatorTable& ops, int stage_begin, int a, int b, int n, const StageContext& context) {
  for (int i = 0; i < n; ++i) {
    const int u = a + i, v = b + i;
    if (ops.saved[u] != ops.saved[v] || ops.saved_once(stage_begin, u) != ops.saved_once(stage_begin, v) ||
        can_offload(ops, u, context) != can_offload(ops, v, context) ||
        ops.inputs[u].size() != ops.inputs[v].size())
      return false;
    for (size_t j = 0; j < ops.inputs[u].size(); ++j) {
      const OperatorTable::InEdge &x = ops.inputs[u][j], &y = ops.inputs[v][j];
      if (x.bytes != y.bytes || x.from - u != y.from - v || (x.from >= stage_begin) != (y.from >= stage_begin) ||
          (!ops.output.empty() && ops.output[x.from] != ops.output[y.from]))
        return false;
    }
  }
  return true;
}

// Segments never span layers, so the layers of the range choose independently and meet only in the
// largest segment: for each candidate largest segment C, every layer takes its least memory with
// segments of at most C, and the best C wins.
StageMemoryPlan least_memory_holding_checkpoints_one_way(const OperatorTable& ops, int begin, int end,
                                                         const StageContext& context) {
  // A model's transformer layers repeat: each distinct shape is solved once, and every layer of the
  // range points at its shape's options.
  std::vector<std::vector<LayerOption>> shapes;
  std::vector<std::pair<int, int>> shape_range;  // per shape: the first operator and size of its first layer
  std::vector<int> shape_of;                     // per layer of the range
  for (int first = begin; first < end;) {
    int last = first + 1;
    while (last < end && ops.same_layer(last - 1, last)) ++last;
    const auto twin = std::find_if(shape_range.begin(), shape_range.end(), [&](const std::pair<int, int>& r) {
      return r.second == last - first && same_shape(ops, begin, r.first, first, last - first, context);
    });
    if (twin == shape_range.end()) {
      shapes.push_back(layer_options(ops, begin, first, last, context));
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
    for (size_t i = 1; i < options.size(); ++i) steps.push_back({options[i].largest, static_cast<int>(l), static_cast<int>(i)});
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
  return evaluate_stage_memory(ops, begin, end, context, decisions);
}

StageMemoryPlan optimize_holding_checkpoints_one_way(const OperatorTable& ops, int begin, int end,
                                                     const StageContext& context, MemorySolver solver);

// Whether a is the better answer: it fits where b does not, is faster where both fit, and holds less
// where neither fits.
bool better_plan(const StageMemoryPlan& a, const StageMemoryPlan& b) {
  if (a.fits != b.fits) return a.fits;
  return a.fits ? a.added_time() < b.added_time() : a.memory < b.memory;
}

// The better of the two ways of holding checkpoints; exact when both answers are.
template <typename Solve>
StageMemoryPlan either_way(const StageContext& context, const Solve& solve) {
  StageMemoryPlan plan = solve(context);
  if (context.offload_checkpoints || !can_offload_checkpoints(context) || (plan.fits && plan.added_time() == 0))
    return plan;
  StageContext offloading = context;
  offloading.offload_checkpoints = true;
  StageMemoryPlan other = solve(offloading);
  const bool exact = plan.exact && other.exact;
  if (better_plan(other, plan)) plan = std::move(other);
  plan.exact = exact;
  return plan;
}

}  // namespace

bool can_offload_checkpoints(const StageContext& context) {
  return context.allow_offload && context.allow_recompute && context.host_bandwidth > 0 && context.in_flight > 1;
}

StageMemoryPlan least_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& stage_context) {
  if (begin < 0 || end > ops.size() || begin > end)
    throw Error(fmt::format("operator range [{}, {}) outside the graph's {} operators", begin, end, ops.size()));
  const StageContext context = with_forward_time(ops, begin, end, stage_context);
  return either_way(context,
                    [&](const StageContext& c) { return least_memory_holding_checkpoints_one_way(ops, begin, end, c); });
}

StageMemoryPlan optimize_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& stage_context,
                                      MemorySolver solver) {
  if (begin < 0 || end > ops.size() || begin > end)
    throw Error(fmt::format("operator range [{}, {}) outside the graph's {} operators", begin, end, ops.size()));
  const StageContext context = with_forward_time(ops, begin, end, stage_context);
  return either_way(context,
                    [&](const StageContext& c) { return optimize_holding_checkpoints_one_way(ops, begin, end, c, solver); });
}

StageMemoryPlan evaluate_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& stage_context,
                                      const std::vector<MemoryDecision>& decisions) {
  if (begin < 0 || end > ops.size() || begin > end)
    throw Error(fmt::format("operator range [{}, {}) outside the graph's {} operators", begin, end, ops.size()));
  const StageContext context = with_forward_time(ops, begin, end, stage_context);
  if (static_cast<int>(decisions.size()) != end - begin)
    throw Error(fmt::format("{} memory decisions for a stage of {} operators", decisions.size(), end - begin));
  const double k = context.in_flight;
  const Fixed fixed = fixed_memory(ops, begin, end, context);
  StageMemoryPlan plan;
  plan.decisions = decisions;
  plan.static_memory = fixed.static_memory;
  double kept = 0, offloaded = 0, checkpoints = 0, rebuilt_all = 0, segment = 0, largest_segment = 0;
  int segment_start = begin;
  const bool sharing = !ops.shared.empty();
  for (int v = begin; v < end; ++v) {
    const MemoryDecision decision = decisions[v - begin];
    const bool as_previous = v > begin && decisions[v - 1 - begin] == decision;
    // Tensors v shares with v - 1 are held once when both decided alike (and, rebuilt, in one segment).
    const double shared = sharing && as_previous ? ops.shared_in_stage(begin, v) : 0;
    switch (decision) {
      case MemoryDecision::Keep: kept += ops.saved[v] - shared; break;
      case MemoryDecision::Offload: offloaded += ops.saved[v] - shared; break;
      case MemoryDecision::Recompute: {
        const bool continues = continues_segment(ops, begin, v, as_previous);
        const double bytes = ops.saved[v] - (continues ? shared : 0);
        segment = (continues ? segment : 0) + bytes;
        if (!continues) segment_start = v;
        largest_segment = std::max(largest_segment, segment);
        rebuilt_all += bytes;
        checkpoints += checkpoint_bytes(ops, v, segment_start);
        plan.recompute_time += ops.forward[v];
        break;
      }
    }
  }
  const double rebuilt = context.split_backward ? rebuilt_all : largest_segment;
  double held = k * kept, moved = offloaded;
  add_checkpoints(checkpoints, context, held, moved);
  // Split, the rebuild's share is not credited against the reload (the dynamic program cannot tell it).
  plan.activation_memory = held + rebuilt + offloaded_held(moved, context, context.split_backward ? 0 : rebuilt);
  plan.memory = fixed.static_memory + fixed.workspace + plan.activation_memory;
  plan.offload_bytes = moved;
  plan.checkpoint_bytes = checkpoints;
  plan.offload_checkpoints = context.offload_checkpoints;
  plan.offload_time = offload_penalty(moved, context);
  plan.fits = plan.memory <= context.budget && plan.offload_time < kInfinity;
  return plan;
}

namespace {

StageMemoryPlan optimize_holding_checkpoints_one_way(const OperatorTable& ops, int begin, int end,
                                                     const StageContext& context, MemorySolver solver) {
  StageMemoryPlan plan;
  if (solver == MemorySolver::Exact) plan = solve_exact(ops, begin, end, context, kMaxParetoPoints);
  else if (solver == MemorySolver::Auto && end - begin <= kExactSolverOperators)
    plan = solve_exact(ops, begin, end, context, kAutoParetoPoints);
  else plan = solve_greedy(ops, begin, end, context);
  if (!plan.fits && context.allow_offload && context.allow_recompute) {
    // The greedy never recomputes what it chose to offload, and offloading saves at most the copies
    // the transfers do not hold: without offloading it may still fit.
    StageContext recompute_only = context;
    recompute_only.allow_offload = false;
    StageMemoryPlan without = solve_greedy(ops, begin, end, recompute_only);
    if (without.fits) {
      plan = evaluate_stage_memory(ops, begin, end, context, without.decisions);
      plan.exact = false;
    }
  }
  if (!plan.fits) {
    // The greedy can miss a fit the least-memory decisions reach: then those are the answer.
    StageMemoryPlan least = least_memory_holding_checkpoints_one_way(ops, begin, end, context);
    least.exact = plan.exact && !least.fits;
    return least;
  }
  return plan;
}

}  // namespace

}  // namespace flexpipe
