// The anytime worker pool: threads, the budget, progress; every phase runs on it.
#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "anytime_search.h"

namespace flexpipe::search {

// Items are taken in order until the budget is spent, the first `untimed` whatever the time (every
// search needs a structure, however short its budget).
void AnytimeSearch::parallel(size_t count, const std::function<void(size_t)>& work, size_t untimed) {
  std::atomic<size_t> next{0};
  std::exception_ptr failure;  // the first error of any thread, rethrown once all have stopped
  std::mutex failure_mutex;
  auto loop = [&] {
    try {
      for (size_t i; (i = next++) < count && (i < untimed || !out_of_time());) {
        work(i);
        maybe_report();
      }
    } catch (...) {
      std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = count;
    }
  };
  const int n = static_cast<int>(std::min<size_t>(threads_, count));
  std::vector<std::thread> pool;
  for (int t = 1; t < n; ++t) pool.emplace_back(loop);
  loop();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

Clock::time_point AnytimeSearch::now() const { return options_.clock ? options_.clock() : Clock::now(); }

double AnytimeSearch::elapsed() const { return std::chrono::duration<double>(now() - start_).count(); }

bool AnytimeSearch::out_of_time() const {
  return elapsed() >= options_.time_budget || (options_.max_evaluations > 0 && evaluated_ >= options_.max_evaluations);
}

double AnytimeSearch::best_makespan() const {
  std::lock_guard lock(mutex_);
  return best_.makespan;
}

SearchProgress AnytimeSearch::progress() const {
  SearchProgress p;
  p.seconds = elapsed();
  p.evaluated = evaluated_ + static_cast<int64_t>(result_.builtins.size());
  p.pruned = pruned_;
  p.best_makespan = best_.makespan;
  p.best = best_family_;
  p.phase = phase_;
  return p;
}

void AnytimeSearch::phase(const std::string& name) {
  std::lock_guard lock(mutex_);
  if (!result_.phases.empty() && phase_ == name) return;
  close_phase_locked();
  phase_ = name;
  result_.phases.push_back({name, elapsed(), evaluated_, pruned_});
}

// The open stretch's figures become its own: until now they held its start.
void AnytimeSearch::close_phase_locked() {
  if (result_.phases.empty() || phase_open_ == result_.phases.size()) return;
  SearchPhase& p = result_.phases.back();
  p.seconds = elapsed() - p.seconds;
  p.evaluated = evaluated_ - p.evaluated;
  p.pruned = pruned_ - p.pruned;
  phase_open_ = result_.phases.size();
}

void AnytimeSearch::record_improvement(const std::string& family) {
  std::lock_guard lock(mutex_);
  record_improvement_locked(family);
}

void AnytimeSearch::record_improvement_locked(const std::string& family) {
  best_family_ = family;
  result_.history.push_back({elapsed(), best_.makespan});
  if (options_.progress) {
    options_.progress(progress());
    last_report_ = elapsed();
  }
}

void AnytimeSearch::maybe_report() const {
  if (!options_.progress || elapsed() - last_report_ < 0.5) return;
  std::lock_guard lock(mutex_);
  if (elapsed() - last_report_ < 0.5) return;
  last_report_ = elapsed();
  options_.progress(progress());
}

bool AnytimeSearch::partitioner_should_stop() const {
  maybe_report();
  return out_of_time();
}

}  // namespace flexpipe::search
