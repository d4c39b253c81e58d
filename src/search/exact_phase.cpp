// The branch-and-bound phase: settles the small structures' orders exactly, where the other phases search.
#include <algorithm>
#include <atomic>
#include <vector>

#include "anytime_search.h"
#include "flexpipe/search/exact_schedule.h"

namespace flexpipe::search_detail {

void AnytimeSearch::exact_phase() {
  if (!options_.exact || problem_.devices > 4 || out_of_time()) return;
  std::vector<ScheduleCandidate> jobs, too_large;
  for (int i = 0; i < static_cast<int>(structures_.size()); ++i) {
    const Structure& s = structures_[i];
    for (bool split : {true, false}) {
      ScheduleCandidate c{i, std::vector<uint8_t>(s.rows.size(), kKeep), {}, 0, 0};
      c.policy.split_backward = split;
      c.lower_bound = tight_bound_of(c);
      // Up to 8 stages; up to 16 when there are no more micro-batches than devices, where filling
      // and draining are most of the step and list scheduling is weakest (the run may end on its
      // time share without a proof, keeping the best order it found).
      const size_t most_stages = s.batch.microbatches <= problem_.devices ? 16 : 8;
      const bool small = s.batch.microbatches <= 8 && s.rows.size() <= most_stages && s.skeleton.num_pipelines == 1;
      (small ? jobs : too_large).push_back(std::move(c));
    }
  }
  if (jobs.empty()) return;
  phase("exact (branch and bound)");
  std::stable_sort(jobs.begin(), jobs.end(), lower_bound_first);
  std::atomic<bool> proven{true};
  std::atomic<size_t> left{jobs.size()};
  parallel(jobs.size(), [&](size_t i) {
    const ScheduleCandidate& c = jobs[i];
    const double incumbent = best_makespan();
    if (c.lower_bound >= incumbent) {  // nothing in this structure beats the best: proven without a search
      --left;
      return;
    }
    ExactOptions exact;
    exact.upper_bound = incumbent;
    exact.time_limit_seconds = std::max(0.05, (options_.time_budget - elapsed()) / static_cast<double>(left.load()));
    const ExactResult r =
        exact_schedule(structures_[c.structure].skeleton, table_of(c), c.policy.split_backward, exact);
    --left;
    evaluated_ += 1;
    if (!r.proven_optimal) proven = false;
    if (!r.found) return;
    std::lock_guard lock(mutex_);
    if (r.makespan < best_.makespan) {
      best_.makespan = r.makespan;
      best_.candidate = c;
      best_builtin_ = -1;
      polished_ = r.schedule;
      order_origin_ = ", order by branch and bound";
      record_improvement_locked(describe_candidate(c) + order_origin_);
    }
  });
  // A structure too large to search is settled only when its bound cannot beat the answer.
  for (const ScheduleCandidate& c : too_large) proven = proven && c.lower_bound >= best_makespan();
  result_.proven_optimal = proven && !out_of_time();
}

}  // namespace flexpipe::search_detail
