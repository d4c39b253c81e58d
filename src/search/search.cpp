// The search's entry point and its phases in order, apart from the phases themselves so the order reads at once.
#include "flexpipe/search/search.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "anytime_search.h"
#include "flexpipe/support/error.h"

namespace flexpipe::search_detail {

AnytimeSearch::AnytimeSearch(const SearchProblem& problem, const SearchOptions& options)
    : problem_(problem), options_(options), start_(options.start.value_or(Clock::now())) {
  if (problem.devices < 1) throw Error(fmt::format("search: {} devices; at least 1", problem.devices));
  if (problem.batches.empty()) throw Error("search: no batch split to search");
  for (const BatchSplit& b : problem.batches)
    if (b.microbatches < 1 || !(b.microbatch_size > 0))
      throw Error(
          fmt::format("search: {} micro-batches of {} samples is not a batch", b.microbatches, b.microbatch_size));
  if (!(problem.memory_limit > 0)) throw Error("search: the memory limit must be positive");
  seq_len_ = problem.seq_len > 0 ? problem.seq_len : problem.graph.reference.seq_len;
  threads_ = std::max(1, options.threads);
}

SearchResult AnytimeSearch::run() {
  // Cheap structures first and a first local search on them, so that a short budget still sees
  // every placement (on huge graphs the budget may end after the first); DawnPiper's plans (a
  // partitioner run per placement, slow on tight budgets) after them, cheapest placements first,
  // then a second local search.
  prepare_structures(false);
  report_builtins();
  phase("generated schedules");
  std::vector<ScheduleCandidate> seeds;
  std::vector<std::pair<double, int>> finished;
  run_seeds(0, seeds, finished);
  climb_from(seeds, finished, 0);
  polish(share(0.05));  // early, a twentieth of what is left
  // DawnPiper's plans twice: with the partitioner's greedy memory solver (fast), then with its exact
  // one on small stages (better plans, seconds on large models under tight limits).
  for (MemorySolver solver : {MemorySolver::Greedy, MemorySolver::Auto}) {
    if (!options_.partitioner || !problem_.memory_choices || problem_.memory_limit == kInfinity || out_of_time()) break;
    const size_t first_structure = structures_.size(), first_seed = seeds.size();
    prepare_structures(true, solver);
    phase("partitioner's plans");
    run_seeds(first_structure, seeds, finished);
    climb_from(seeds, finished, first_seed);
    if (solver == MemorySolver::Greedy) polish(share(0.1));
  }
  exact_phase();
  polish(options_.time_budget);
  result_.exhausted = !out_of_time();
  finish();
  return std::move(result_);
}

// Evaluates the seed candidates of structures [first, end), lowest lower bound first.
void AnytimeSearch::run_seeds(size_t first, std::vector<ScheduleCandidate>& seeds,
                              std::vector<std::pair<double, int>>& finished) {
  std::vector<ScheduleCandidate> batch = seed_candidates(first);
  std::stable_sort(batch.begin(), batch.end(), lower_bound_first);
  const size_t offset = seeds.size();
  for (ScheduleCandidate& c : batch) {
    c.order = next_order_++;
    seeds.push_back(std::move(c));
  }
  finished.resize(seeds.size(), {kInfinity, 0});
  parallel(seeds.size() - offset, [&](size_t i) {
    const Evaluation e = evaluate(seeds[offset + i]);
    if (e.fits) finished[offset + i] = {e.makespan, static_cast<int>(offset + i)};
  });
}

}  // namespace flexpipe::search_detail

namespace flexpipe {

SearchResult search_schedules(const SearchProblem& problem, const SearchOptions& options) {
  return search_detail::AnytimeSearch(problem, options).run();
}

}  // namespace flexpipe
