// Phase 2, hill climbing from the best seeds: moves between candidates, never below them to orders.
#include <algorithm>
#include <random>
#include <vector>

#include "anytime_search.h"
#include "flexpipe/ir/lowering.h"

namespace flexpipe::search {

// Hill climbing from the best seeds among seeds[first..].
void AnytimeSearch::climb_from(const std::vector<ScheduleCandidate>& seeds,
                               const std::vector<std::pair<double, int>>& finished, size_t first) {
  if (!options_.local_search || out_of_time()) return;
  phase("local search");
  std::vector<std::pair<double, int>> ranked(finished.begin() + static_cast<long>(first), finished.end());
  std::sort(ranked.begin(), ranked.end());
  // The best seeds overall, then the best seed of every other structure whose bound is below the
  // best so far, most promising bound first: a structure may hold the answer even when its first
  // candidates were not the fastest. As many starts whatever the number of threads, climbed in waves
  // of a fixed size, each pruned by the best when it began: the climbs, and the answer, depend on
  // neither the threads nor which of them finishes first.
  constexpr size_t kBestStarts = 12, kWave = 4;
  std::vector<ScheduleCandidate> starts;
  std::vector<char> started(structures_.size(), 0);
  for (const auto& [makespan, i] : ranked) {
    if (makespan == kInfinity || starts.size() >= kBestStarts) break;
    starts.push_back(seeds[i]);
    started[seeds[i].structure] = 1;
  }
  std::vector<ScheduleCandidate> others;
  for (const auto& [makespan, i] : ranked)
    if (makespan < kInfinity && !started[seeds[i].structure]) {
      started[seeds[i].structure] = 1;
      others.push_back(seeds[i]);
    }
  std::stable_sort(others.begin(), others.end(), lower_bound_first);
  const size_t best_starts = starts.size();
  starts.insert(starts.end(), others.begin(), others.end());
  for (size_t from = 0; from < starts.size() && !out_of_time(); from += kWave) {
    const double prune_at = best_makespan();
    std::vector<size_t> wave;  // the other structures' starts only while their bound can beat the best
    for (size_t i = from; i < std::min(starts.size(), from + kWave); ++i)
      if (i < best_starts || starts[i].lower_bound < prune_at) wave.push_back(i);
    parallel(wave.size(), [&](size_t k) { climb(starts[wave[k]], first + wave[k], prune_at); });
  }
}

// A neighbour is skipped when its bound reaches this climb's own value (it could not be taken) or
// `prune_at`, the best when the climbs began (it could not beat that).
void AnytimeSearch::climb(ScheduleCandidate current, size_t seed, double prune_at) {
  const CostTable table = table_of(current);
  double value = kInfinity;
  if (const auto schedule = build(current, table)) {
    const SimOutcome sim = try_simulate(lower(*schedule), table, {.record_timeline = false, .record_memory = false});
    value = sim.status == SimStatus::Ok ? sim.result.makespan : kInfinity;
    if (current.policy.inflight.empty()) current.policy.inflight = observed_inflight(*schedule);
  }
  std::mt19937 random(static_cast<uint32_t>(seed * 7919 + 17));
  for (bool improved = true; improved && !out_of_time();) {
    improved = false;
    std::vector<ScheduleCandidate> around = neighbours(current);
    std::shuffle(around.begin(), around.end(), random);
    for (ScheduleCandidate& next : around) {
      next.lower_bound = lower_bound_of(next);
      const Evaluation e = evaluate(next, std::min(value, prune_at));
      if (e.fits && e.makespan < value) {
        value = e.makespan;
        current = std::move(next);
        improved = true;
        break;
      }
      if (out_of_time()) break;
    }
  }
}

std::vector<int> AnytimeSearch::observed_inflight(const Schedule& schedule) {
  std::vector<int> out;
  for (const auto& list : schedule.device_actions) {
    int open = 0, peak = 1;
    for (const Action& a : list) {
      if (a.kind == ActionKind::F) peak = std::max(peak, ++open);
      if (a.kind == ActionKind::B || a.kind == ActionKind::I) --open;
    }
    out.push_back(peak);
  }
  return out;
}

}  // namespace flexpipe::search
