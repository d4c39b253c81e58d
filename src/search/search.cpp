// The search's entry point and its phases in order, apart from the phases themselves so the order reads at once.
#include "flexpipe/search/search.h"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "anytime_search.h"
#include "flexpipe/support/error.h"

namespace flexpipe::search {

namespace {
// The early polishings' cap per start, in actions simulated (each simulation counts its lowered
// schedule's actions): about half a second on the development VM whatever the model's size, and,
// unlike a share of the time, the same on every machine, so what they find (which prunes the phases
// after them) does not depend on its speed or on the budget.
constexpr int64_t kEarlyPolishWork = 1'000'000;
}  // namespace

AnytimeSearch::AnytimeSearch(const SearchProblem& problem, const SearchOptions& options)
    : problem_(problem), options_(options), start_(options.start.value_or(now())) {
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
  polish(kEarlyPolishWork);  // early, and capped: the cheap structures' best orders
  // DawnPiper's plans twice: with the partitioner's greedy memory solver (fast), then with its exact
  // one on small stages (better plans, seconds on large models under tight limits).
  for (MemorySolver solver : {MemorySolver::Greedy, MemorySolver::Auto}) {
    if (!options_.partitioner || problem_.stage_costs || !problem_.memory_choices ||
        problem_.memory_limit == kInfinity || out_of_time())
      break;
    const size_t first_structure = structures_.size(), first_seed = seeds.size();
    prepare_structures(true, solver);
    phase("partitioner's plans");
    run_seeds(first_structure, seeds, finished);
    climb_from(seeds, finished, first_seed);
    if (solver == MemorySolver::Greedy) polish(2 * kEarlyPolishWork);
  }
  // Every polishing start to its end (or the budget's), then branch and bound below that answer: with
  // no phase stopped by a share of the time, the answer does not depend on the budget or the threads.
  polish(int64_t{0});
  exact_phase();
  result_.exhausted = !out_of_time();
  finish();
  return std::move(result_);
}

// Evaluates the seed candidates of structures [first, end), lowest lower bound first, in chunks of a
// fixed size: each chunk is pruned by the best of the chunks before it, so what is pruned does not
// depend on the number of threads or on which of them finishes first.
void AnytimeSearch::run_seeds(size_t first, std::vector<ScheduleCandidate>& seeds,
                              std::vector<std::pair<double, int>>& finished) {
  constexpr size_t kChunk = 64;
  std::vector<ScheduleCandidate> batch = seed_candidates(first);
  std::stable_sort(batch.begin(), batch.end(), lower_bound_first);
  const size_t offset = seeds.size();
  for (ScheduleCandidate& c : batch) seeds.push_back(std::move(c));
  finished.resize(seeds.size(), {kInfinity, 0});
  for (size_t from = offset; from < seeds.size() && !out_of_time(); from += kChunk) {
    const double prune_at = best_makespan();
    parallel(std::min(kChunk, seeds.size() - from), [&](size_t i) {
      const Evaluation e = evaluate(seeds[from + i], prune_at);
      if (e.fits) finished[from + i] = {e.makespan, static_cast<int>(from + i)};
    });
  }
}

}  // namespace flexpipe::search

namespace flexpipe {

SearchResult search_schedules(const SearchProblem& problem, const SearchOptions& options) {
  return search::AnytimeSearch(problem, options).run();
}

}  // namespace flexpipe
