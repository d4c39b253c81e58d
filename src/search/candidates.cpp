// Candidates: their costs, bounds, schedules, evaluation and neighbours, the unit every phase works with.
#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

#include "anytime_search.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/ir/memory_actions.h"
#include "flexpipe/search/zero_bubble_heuristic.h"

namespace flexpipe::search {

CostTable AnytimeSearch::table_of(const ScheduleCandidate& c) const {
  const Structure& s = structures_[c.structure];
  CostTable table = s.base;
  for (size_t k = 0; k < c.rows.size(); ++k) table.stages[k] = s.rows[k][c.rows[k]];
  return table;
}

// Per global stage (every pipeline's copy of a chunk decides alike).
std::vector<char> AnytimeSearch::flags(const ScheduleCandidate& c, Flag which) const {
  const Structure& s = structures_[c.structure];
  std::vector<char> out(s.skeleton.num_stages());
  for (size_t g = 0; g < out.size(); ++g) {
    const int k = s.skeleton.chunk_of_stage(static_cast<int>(g));
    const uint8_t row = c.rows[k];
    out[g] = which == Flag::Recompute ? s.recomputes[k][row]
             : which == Flag::Offload ? s.offloads[k][row]
                                      : row == kPlan && s.plan_offloads_checkpoints[k];
  }
  return out;
}

// What ranks and prunes candidates: the closed-form bound, cheap enough for every candidate.
double AnytimeSearch::lower_bound_of(const ScheduleCandidate& c) const {
  return schedule_path_bound(structures_[c.structure].skeleton, table_of(c), c.policy.split_backward,
                             flags(c, Flag::Recompute));
}

// What proofs and the reported space bound use: the full bound (a preemptive schedule per device),
// computed once per structure, memory rows and backward kind.
double AnytimeSearch::tight_bound_of(const ScheduleCandidate& c) const {
  auto key = std::make_tuple(c.structure, c.rows, c.policy.split_backward);
  {
    std::lock_guard lock(bounds_mutex_);
    if (auto found = bounds_.find(key); found != bounds_.end()) return found->second;
  }
  const double bound = schedule_lower_bound(structures_[c.structure].skeleton, table_of(c), c.policy.split_backward,
                                            flags(c, Flag::Recompute));
  std::lock_guard lock(bounds_mutex_);
  bounds_.emplace(std::move(key), bound);
  return bound;
}

// The candidate's compute-only order, from the list scheduler or Zero Bubble's heuristic; nothing when
// the policy stalls or the heuristic finds no room for a forward.
std::optional<Schedule> AnytimeSearch::order_of(const ScheduleCandidate& c, const CostTable& table) const {
  if (c.zero_bubble >= 0)
    return zero_bubble_order(structures_[c.structure].skeleton, table, zero_bubble_variants()[c.zero_bubble]);
  Schedule order = structures_[c.structure].skeleton;
  if (!list_schedule(order, table, c.policy, flags(c, Flag::Recompute), flags(c, Flag::Offload))) return std::nullopt;
  return order;
}

// A compute-only order of the candidate's structure with its R / OFFLOAD / RELOAD placed.
Schedule AnytimeSearch::with_memory_actions(const Schedule& order, const ScheduleCandidate& c) const {
  const std::vector<char> recompute = flags(c, Flag::Recompute), offload = flags(c, Flag::Offload);
  const bool any = std::any_of(recompute.begin(), recompute.end(), [](char f) { return f; }) ||
                   std::any_of(offload.begin(), offload.end(), [](char f) { return f; });
  return any ? add_memory_actions(order, recompute, offload, flags(c, Flag::ReloadBeforeRecompute)) : order;
}

// The candidate's schedule: the list scheduler's order with R / OFFLOAD / RELOAD placed.
std::optional<Schedule> AnytimeSearch::build(const ScheduleCandidate& c, const CostTable& table) const {
  std::optional<Schedule> order = order_of(c, table);
  if (order) order = with_memory_actions(*order, c);
  return order;
}

// Pruned when its bound reaches `prune_at`: a value the caller fixed (the best at a fixed point, or a
// climber's own value), never the best as it moves while workers run.
Evaluation AnytimeSearch::evaluate(const ScheduleCandidate& c, double prune_at) {
  Evaluation e;
  if (out_of_time()) return e;
  if (c.lower_bound >= prune_at) {
    ++pruned_;
    return e;
  }
  const CostTable table = table_of(c);
  const std::optional<Schedule> schedule = build(c, table);
  ++evaluated_;
  if (!schedule) {
    ++stalled_;
    return e;
  }
  // Zero Bubble's heuristic can write an order that deadlocks (its estimate of time is not the
  // simulator's); the list scheduler's never do.
  const SimOutcome sim = try_simulate(lower(*schedule), table, {.record_timeline = false, .record_memory = false});
  if (!sim.ran()) {
    ++stalled_;
    return e;
  }
  e.fits = sim.result.fits;
  e.makespan = sim.result.makespan;
  offer(c, e);
  return e;
}

// Whether (makespan, source, c) beats the answer so far: a smaller makespan, or an equal one from an
// earlier source or, from the same source, a lower candidate key (a total order, so the answer does
// not depend on which worker arrives first).
bool AnytimeSearch::improves_locked(double makespan, Source source, const ScheduleCandidate& c) const {
  if (makespan != best_.makespan) return makespan < best_.makespan;
  if (best_builtin_ >= 0) return false;
  if (!best_.candidate) return true;
  if (source != best_.source) return source < best_.source;
  return candidate_key(c) < candidate_key(*best_.candidate);
}

void AnytimeSearch::set_best_locked(double makespan, Source source, const ScheduleCandidate& c) {
  const bool better = makespan < best_.makespan;
  best_.makespan = makespan;
  best_.source = source;
  best_.candidate = c;
  best_builtin_ = -1;
  if (source == Source::Candidate) polished_.reset();
  if (better)
    record_improvement_locked(describe_candidate(c) + (source == Source::Candidate ? std::string() : order_origin_));
}

void AnytimeSearch::offer(const ScheduleCandidate& c, const Evaluation& e) {
  std::lock_guard lock(mutex_);
  if (!e.fits) return;
  best_.fits_any = true;
  if (improves_locked(e.makespan, Source::Candidate, c)) set_best_locked(e.makespan, Source::Candidate, c);
  // The best few of different structures, fastest first (ties by candidate key): the starts of the
  // order polishing.
  auto before = [](const std::pair<double, ScheduleCandidate>& a, const std::pair<double, ScheduleCandidate>& b) {
    return a.first != b.first ? a.first < b.first : candidate_key(a.second) < candidate_key(b.second);
  };
  const std::pair<double, ScheduleCandidate> entry{e.makespan, c};
  auto same = std::find_if(top_.begin(), top_.end(), [&](const auto& t) { return t.second.structure == c.structure; });
  if (same != top_.end() && !before(entry, *same)) return;
  if (same != top_.end()) top_.erase(same);
  top_.insert(std::upper_bound(top_.begin(), top_.end(), entry, before), entry);
  if (top_.size() > kPolished) top_.pop_back();
}

bool AnytimeSearch::row_acts(const Structure& s, size_t k, int r) {
  return r == kKeep || r == kPlan || (r == kRecompute && s.recomputes[k][r]) || (r == kOffload && s.offloads[k][r]);
}

// A heuristic's variants are all seeds already and take no policy, so it has no neighbours.
std::vector<ScheduleCandidate> AnytimeSearch::neighbours(const ScheduleCandidate& c) const {
  const Structure& s = structures_[c.structure];
  std::vector<ScheduleCandidate> out;
  if (c.zero_bubble >= 0) return out;
  for (size_t d = 0; d < c.policy.inflight.size(); ++d)
    for (int delta : {-1, 1}) {
      ScheduleCandidate n = c;
      n.policy.inflight[d] += delta;
      if (n.policy.inflight[d] >= 1) out.push_back(std::move(n));
    }
  for (size_t k = 0; k < c.rows.size() && problem_.memory_choices; ++k)
    for (int r = 0; r < kRows; ++r)
      if (r != c.rows[k] && s.has_row[r] && row_acts(s, k, r)) {
        ScheduleCandidate n = c;
        n.rows[k] = static_cast<uint8_t>(r);
        out.push_back(std::move(n));
      }
  ScheduleCandidate n = c;
  n.policy.backward_first = !n.policy.backward_first;
  out.push_back(n);
  n = c;
  n.policy.split_backward = !n.policy.split_backward;
  out.push_back(n);
  if (c.policy.split_backward) {
    n = c;
    n.policy.weight = n.policy.weight == WeightTiming::FillIdle ? WeightTiming::Late : WeightTiming::FillIdle;
    out.push_back(n);
  }
  if (stages_per_device(s.placement, s.chunks) > 1) {
    n = c;
    n.policy.forward = n.policy.forward == ForwardOrder::Oldest ? ForwardOrder::Shallow : ForwardOrder::Oldest;
    out.push_back(n);
  }
  return out;
}

}  // namespace flexpipe::search
