// Which of the search's answers a run trains: its own schedule or the fastest built-in.
#include "flexpipe/search/search.h"

namespace flexpipe {

const ScheduleCandidateReport* fastest_builtin(const SearchResult& result) {
  const ScheduleCandidateReport* fastest = nullptr;
  for (const ScheduleCandidateReport& b : result.builtins)
    if (b.skipped.empty() && b.fits && b.placement_searched && (!fastest || b.makespan < fastest->makespan))
      fastest = &b;
  return fastest;
}

const ScheduleCandidateReport& answer_to_train(const SearchResult& result, double margin) {
  const ScheduleCandidateReport* builtin = fastest_builtin(result);
  const bool clear_win =
      result.best.name != "search" || !builtin || result.best.makespan <= (1 - margin) * builtin->makespan;
  return clear_win ? result.best : *builtin;
}

double training_margin(double margin, bool margin_given, int ranks_on_machine, unsigned cores) {
  const bool cores_shared = cores > 0 && ranks_on_machine > static_cast<int64_t>(cores);
  return cores_shared && !margin_given ? 1.0 : margin;
}

}  // namespace flexpipe
