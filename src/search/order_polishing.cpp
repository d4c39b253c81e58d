// Phase 3, order polishing: local search over per-device orders, below the candidates the other phases move.
#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "anytime_search.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/sim/simulator.h"

namespace flexpipe::search {

// Swaps neighbouring compute actions of one device (not two of the same stage and kind, whose
// micro-batch order is kept, nor a micro-batch's own F and backward), keeping a swap when the
// simulated makespan falls and the schedule still fits; passes until none helps. The simulator
// rejects orders that deadlock.
// At most `work` actions simulated per start (0: no cap; the budget bounds it too), each start once.
// The cap counts work, not time, so a start it cuts short stops at the same swap on any machine and
// under any budget: what the early polishings find does not depend on either.
void AnytimeSearch::polish(int64_t work) {
  std::vector<ScheduleCandidate> starts;
  {
    std::lock_guard lock(mutex_);
    for (const auto& entry : top_) {
      const ScheduleCandidate& c = entry.second;
      const bool done = std::any_of(polished_starts_.begin(), polished_starts_.end(),
                                    [&](const ScheduleCandidate& d) { return candidate_key(d) == candidate_key(c); });
      if (!done) starts.push_back(c), polished_starts_.push_back(c);
    }
  }
  if (!options_.local_search || starts.empty() || out_of_time()) return;
  phase("order polishing");
  parallel(starts.size(), [&](size_t i) { polish(starts[i], work); });
}

void AnytimeSearch::polish(const ScheduleCandidate& start, int64_t work) {
  const CostTable table = table_of(start);
  std::optional<Schedule> listed = order_of(start, table);
  if (!listed) return;
  Schedule& order = *listed;
  int64_t done = 0;  // actions simulated
  auto makespan_of = [&](const Schedule& s) {
    const Schedule lowered = lower(with_memory_actions(s, start));
    done += lowered.num_actions();
    const SimOutcome sim = try_simulate(lowered, table, {.record_timeline = false, .record_memory = false});
    if (!sim.ran()) return kInfinity;  // the swap made the order deadlock
    ++evaluated_;
    return sim.status == SimStatus::Ok ? sim.result.makespan : kInfinity;
  };
  double value = makespan_of(order);
  // Every order better than the best so far becomes the answer at once (anytime).
  auto publish = [&] {
    std::lock_guard lock(mutex_);
    if (!improves_locked(value, Source::Polished, start)) return;
    polished_ = order;
    order_origin_ = ", then reordered by local search";
    set_best_locked(value, Source::Polished, start);
  };
  auto stop = [&] { return out_of_time() || (work > 0 && done >= work); };
  for (bool improved = true; improved && !stop();) {
    improved = false;
    for (auto& list : order.device_actions)
      for (size_t i = 0; i + 1 < list.size() && !stop(); ++i) {
        const Action a = list[i], b = list[i + 1];
        if (a.stage == b.stage && (a.kind == b.kind || a.microbatch == b.microbatch)) continue;
        std::swap(list[i], list[i + 1]);
        const double next = makespan_of(order);
        if (next < value) {
          value = next;
          improved = true;
          publish();
        } else {
          std::swap(list[i], list[i + 1]);
        }
      }
    // Only the bidirectional pair has fronts crossing each other's backlog; on one pipeline the
    // extra simulations cost more time than they win.
    if (!improved && !stop() && order.num_pipelines > 1)
      improved = advance_fronts(order, start, table, value, done, stop, publish);
  }
}

// A micro-batch's way crosses a backlog on every device it passes (on the bidirectional pair, the
// other pipeline's forwards queued since the start), so moving its action one place earlier on a
// single device rarely helps: its arrival further on only improves when it moves on every device
// at once. Tries that, for each micro-batch and for the micro-batches of one rank in every pipeline
// (symmetric pipelines are critical together): on each device the action moves ahead of the
// actions that started after its input was there (up to `reach` of them), and the move is kept
// when it lowers the makespan, or keeps it and lowers the sum of the devices' finishing times (a
// strict order: no cycles).
template <class Stop, class Publish>
bool AnytimeSearch::advance_fronts(Schedule& order, const ScheduleCandidate& start, const CostTable& table,
                                   double& value, int64_t& done, Stop stop, Publish publish) {
  const int M = order.num_microbatches, stages = order.num_stages();
  auto slot = [&](ActionKind kind, int stage, int mb) {
    const int k = kind == ActionKind::F ? 0 : kind == ActionKind::W ? 2 : 1;  // I and B: the backward
    return (static_cast<size_t>(k) * stages + stage) * M + mb;
  };
  std::vector<Interval> when(3 * static_cast<size_t>(stages) * M);
  auto measure = [&](const Schedule& s, bool record) -> std::pair<double, double> {
    const Schedule lowered = lower(with_memory_actions(s, start));
    done += lowered.num_actions();
    const SimOutcome outcome = try_simulate(lowered, table, {.record_timeline = true, .record_memory = false});
    if (!outcome.ran()) return {kInfinity, kInfinity};  // the move made the order deadlock
    ++evaluated_;
    if (outcome.status != SimStatus::Ok) return {kInfinity, kInfinity};
    const SimResult& sim = outcome.result;
    double finishing = 0;
    for (size_t d = 0; d < sim.timeline.size(); ++d) {
      double last = 0;
      for (size_t i = 0; i < sim.timeline[d].size(); ++i) {
        last = std::max(last, sim.timeline[d][i].end);
        const Action& x = lowered.device_actions[d][i];
        const bool compute =
            x.kind == ActionKind::F || x.kind == ActionKind::I || x.kind == ActionKind::B || x.kind == ActionKind::W;
        if (record && compute && x.microbatch >= 0) when[slot(x.kind, x.stage, x.microbatch)] = sim.timeline[d][i];
      }
      finishing += last;
    }
    return {sim.makespan, finishing};
  };
  auto transfer = [&](int from, int to) {
    const int a = order.stage_device[from], b = order.stage_device[to];
    return a == b ? 0.0
                  : table.link_between(a, b).transfer_time(
                        table.stages[order.chunk_of_stage(std::min(from, to))].output_bytes);
  };
  // When the action's inputs are there, in the current order's simulation.
  auto ready = [&](const Action& x) {
    if (x.kind == ActionKind::F)
      return order.is_first_stage(x.stage)
                 ? 0.0
                 : when[slot(ActionKind::F, x.stage - 1, x.microbatch)].end + transfer(x.stage - 1, x.stage);
    double at = when[slot(ActionKind::F, x.stage, x.microbatch)].end;
    if (!order.is_last_stage(x.stage))
      at = std::max(at, when[slot(x.kind, x.stage + 1, x.microbatch)].end + transfer(x.stage + 1, x.stage));
    return at;
  };
  std::pair<double, double> current = measure(order, true);
  std::vector<std::vector<int>> groups;
  std::vector<int> rank(M), seen(order.num_pipelines, 0);
  for (int mb = 0; mb < M; ++mb) rank[mb] = seen[order.pipeline_of_microbatch(mb)]++;
  if (order.num_pipelines > 1)
    for (int k = 0; k < M; ++k) {
      std::vector<int> group;
      for (int mb = 0; mb < M; ++mb)
        if (rank[mb] == k) group.push_back(mb);
      if (group.size() > 1) groups.push_back(group);
    }
  for (int mb = 0; mb < M; ++mb) groups.push_back({mb});
  bool any = false;
  for (bool improved = true; improved && !stop();) {
    improved = false;
    for (const std::vector<int>& group : groups)
      for (ActionKind kind : {ActionKind::F, ActionKind::I, ActionKind::B})
        for (int reach : {1, M}) {
          if (stop()) return any;
          std::vector<char> moving(M, 0);
          for (int mb : group) moving[mb] = 1;
          Schedule next = order;
          bool moved = false;
          for (auto& list : next.device_actions)
            for (size_t i = 1; i < list.size(); ++i) {
              const Action b = list[i];
              if (b.kind != kind || b.microbatch < 0 || !moving[b.microbatch]) continue;
              const double input = ready(b);
              for (size_t at = i, steps = 0; at > 0 && steps < static_cast<size_t>(reach); --at, ++steps) {
                const Action a = list[at - 1];
                if (a.microbatch < 0 || moving[a.microbatch]) break;
                if (a.stage == b.stage && (a.kind == b.kind || a.microbatch == b.microbatch)) break;
                if (a.kind != ActionKind::F && a.kind != ActionKind::I && a.kind != ActionKind::B &&
                    a.kind != ActionKind::W)
                  break;
                if (when[slot(a.kind, a.stage, a.microbatch)].end <= input) break;  // b did not wait for it
                std::swap(list[at - 1], list[at]);
                moved = true;
              }
            }
          if (!moved) continue;
          const std::pair<double, double> measured = measure(next, false);
          if (measured < current) {
            order = std::move(next);
            current = measure(order, true);
            improved = true;
            if (current.first < value) {
              value = current.first;
              any = true;
              publish();
            }
          }
        }
  }
  return any;
}

}  // namespace flexpipe::search
