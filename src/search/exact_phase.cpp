// The branch-and-bound phase: settles the small structures' orders exactly, where the other phases search.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "anytime_search.h"
#include "flexpipe/search/exact_schedule.h"

namespace flexpipe::search {

namespace {
// Branch-and-bound nodes per structure (about 700 thousand nodes a second on p = 4 on the development
// VM; most small instances are proved in far fewer). A few seconds where m <= p, where filling and
// draining are most of the step and list scheduling is weakest, and on one stage per device (the
// small instances search_bench proves). Otherwise a tenth of a second: there the phases before it
// have already found good orders, and the larger count spent 11 of the README example's 13 s
// (gpt3-1.3b, p = 4, m = 8, loop v = 2 and V placements) for 1% (docs/performance.md).
constexpr int64_t kExactNodesLarge = int64_t{1} << 21;
constexpr int64_t kExactNodes = int64_t{1} << 16;
}  // namespace

void AnytimeSearch::exact_phase() {
  if (!options_.exact || problem_.devices > 4 || out_of_time()) return;
  std::vector<ScheduleCandidate> jobs, too_large;
  for (int i = 0; i < static_cast<int>(structures_.size()); ++i) {
    const Structure& s = structures_[i];
    for (bool split : {true, false}) {
      ScheduleCandidate c{i, std::vector<uint8_t>(s.rows.size(), kKeep), {}, -1, 0};
      c.policy.split_backward = split;
      c.lower_bound = tight_bound_of(c);
      // Up to 8 stages; up to 16 when there are no more micro-batches than devices, where filling
      // and draining are most of the step and list scheduling is weakest (the run may end at its
      // node count without a proof, keeping the best order it found).
      const size_t most_stages = s.batch.microbatches <= problem_.devices ? 16 : 8;
      const bool small = s.batch.microbatches <= 8 && s.rows.size() <= most_stages && s.skeleton.num_pipelines == 1;
      (small ? jobs : too_large).push_back(std::move(c));
    }
  }
  if (jobs.empty()) return;
  phase("exact (branch and bound)");
  std::stable_sort(jobs.begin(), jobs.end(), lower_bound_first);
  std::atomic<bool> proven{true};
  // Every job searches below the same incumbent, the answer when the phase begins (polishing has run
  // to its end), not the best as other jobs move it, and stops after a number of nodes rather than a
  // share of the time: a phase that ends before the budget finds the same orders whatever the
  // threads, the budget and the machine's speed.
  const double incumbent = best_makespan();
  parallel(jobs.size(), [&](size_t i) {
    const ScheduleCandidate& c = jobs[i];
    if (c.lower_bound >= incumbent) return;  // nothing in this structure beats the best: proven without a search
    ExactOptions exact;
    exact.upper_bound = incumbent;
    const Structure& s = structures_[c.structure];
    const bool fill_drain = s.batch.microbatches <= problem_.devices;
    const bool one_stage_per_device = s.rows.size() <= static_cast<size_t>(problem_.devices);
    exact.max_nodes = fill_drain || one_stage_per_device ? kExactNodesLarge : kExactNodes;
    exact.time_limit_seconds = std::max(0.0, options_.time_budget - elapsed());
    const ExactResult r =
        exact_schedule(structures_[c.structure].skeleton, table_of(c), c.policy.split_backward, exact);
    evaluated_ += 1;
    if (!r.proven_optimal) proven = false;
    if (!r.found) return;
    std::lock_guard lock(mutex_);
    if (!improves_locked(r.makespan, Source::Exact, c)) return;
    polished_ = r.schedule;
    order_origin_ = ", order by branch and bound";
    set_best_locked(r.makespan, Source::Exact, c);
  });
  // A structure too large to search is settled only when its bound cannot beat the answer.
  for (const ScheduleCandidate& c : too_large) proven = proven && c.lower_bound >= incumbent;
  result_.proven_optimal = proven && !out_of_time();
}

}  // namespace flexpipe::search
