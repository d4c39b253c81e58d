// Reporting: built-ins, the answer and what would fit, turned into what the caller reads; no search here.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "anytime_search.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/search/bound.h"
#include "flexpipe/search/zero_bubble_heuristic.h"
#include "flexpipe/support/error.h"

namespace flexpipe::search {

namespace {

std::string describe_variant(const ZeroBubbleVariant& v) {
  return fmt::format("split backward, Zero Bubble's greedy heuristic ({}, {}, {})",
                     v.bubble_before_first_backward ? "waits before the first I" : "no wait before the first I",
                     v.backward_first ? "I first" : "F first",
                     v.fill_short_waits ? "W fills every wait" : "short waits left idle");
}

// Each micro-batch's forwards and whole backwards before the next one's, on its own pipeline.
Schedule one_at_a_time(const Schedule& skeleton) {
  Schedule order = skeleton;
  const int chunks = skeleton.stages_per_pipeline;
  for (int mb = 0; mb < skeleton.num_microbatches; ++mb) {
    for (int k = 0; k < chunks; ++k) {
      const int stage = skeleton.stage_for(k, mb);
      order.device_actions[skeleton.stage_device[stage]].push_back(Action::make(ActionKind::F, stage, mb));
    }
    for (int k = chunks - 1; k >= 0; --k) {
      const int stage = skeleton.stage_for(k, mb);
      order.device_actions[skeleton.stage_device[stage]].push_back(Action::make(ActionKind::B, stage, mb));
    }
  }
  return order;
}

std::string placement_name(PlacementKind placement, int chunks) {
  if (placement == PlacementKind::Bidirectional) return "bidirectional";
  return placement == PlacementKind::V ? "V-shape" : chunks == 1 ? "loop" : fmt::format("loop v={}", chunks);
}

}  // namespace

void AnytimeSearch::report_builtins() {
  phase("built-ins");
  const BatchSplit batch = problem_.batches.front();
  for (const BuiltinSchedule& builtin : builtin_schedules()) {
    ScheduleCandidateReport r;
    r.name = builtin.name;
    r.batch = batch;
    try {
      if (problem_.stage_costs) {
        // A table's stages are fixed: a built-in runs on it when it has as many (the interleaved ones
        // with as many stages per device as the table allows).
        const int stages = static_cast<int>(problem_.stage_costs->costs.stages.size());
        const int per_device = stages % problem_.devices == 0 ? stages / problem_.devices : 0;
        const int chunks = builtin.chunks_adjustable && per_device >= 2 ? per_device : 0;
        r.schedule = library_schedule(builtin.name, {problem_.devices, batch.microbatches, chunks});
        if (r.schedule.stages_per_pipeline != stages) {
          r.skipped =
              fmt::format("has {} stages per pipeline, the cost table {}", r.schedule.stages_per_pipeline, stages);
          r.schedule = {};
          result_.builtins.push_back(std::move(r));
          continue;
        }
        r.partition = Partition{stages, {}};
        r.costs = table_costs();
      } else {
        r.schedule = library_schedule(builtin.name, {problem_.devices, batch.microbatches, 0});
        const Shape shape{batch.microbatch_size, seq_len_};
        const double host = problem_.aggregation.host_link.bandwidth;
        r.partition = balanced_partition(r.schedule.stages_per_pipeline, batch, shape, std::isfinite(host) ? host : 0);
        r.decisions.assign(problem_.graph.nodes.size(), MemoryDecision::Keep);
        r.costs = aggregate_stages(problem_.graph, r.partition, aggregation(batch)).table;
      }
      r.family = fmt::format("built-in {}", builtin.name);
      simulate_report(r);
      ++result_.evaluated;
      const std::vector<char> split_stages = split_backward_stages(r.schedule);
      const bool split = std::find(split_stages.begin(), split_stages.end(), 1) != split_stages.end();
      builtin_bound_ =
          std::min(builtin_bound_,
                   r.costs.overlap_ratio >= 1 ? schedule_lower_bound(r.schedule, r.costs, split, {}) : r.lower_bound);
    } catch (const Error& e) {
      // Not a candidate's rejection: the report says why the built-in does not run here.
      r.skipped = e.what();
      r.schedule = {};
    }
    r.placement_searched = r.skipped.empty() && builtin_placement_searched(r.schedule);
    if (options_.builtin_candidates && r.skipped.empty() && r.fits && r.makespan < best_.makespan &&
        r.placement_searched) {
      std::lock_guard lock(mutex_);
      best_.makespan = r.makespan;
      best_builtin_ = static_cast<int>(result_.builtins.size());
      record_improvement_locked(r.family);
    }
    result_.builtins.push_back(std::move(r));
  }
}

void AnytimeSearch::simulate_report(ScheduleCandidateReport& r) const {
  const SimResult sim = simulate(lower(r.schedule), r.costs, {.record_timeline = false, .record_memory = false});
  r.makespan = sim.makespan;
  r.bubble_ratio = sim.bubble_ratio;
  r.lower_bound = sim.lower_bound;
  r.fits = sim.fits;
  r.peak_memory.clear();
  for (const DeviceReport& d : sim.devices) r.peak_memory.push_back(d.peak_memory);
}

std::string AnytimeSearch::describe_candidate(const ScheduleCandidate& c) const {
  const Structure& s = structures_[c.structure];
  std::array<int, kRows> counts{};
  for (uint8_t r : c.rows) ++counts[r];
  std::string memory;
  for (int r = 0; r < kRows; ++r)
    if (counts[r] > 0) memory += fmt::format("{}{} {}", memory.empty() ? "" : ", ", kRowNames[r], counts[r]);
  const std::string order =
      c.zero_bubble >= 0 ? describe_variant(zero_bubble_variants()[c.zero_bubble]) : describe(c.policy);
  if (problem_.stage_costs)  // the table's stages; its costs are per micro-batch, of whatever size
    return fmt::format("{}, m={}, stages {}; {}", placement_name(s.placement, s.chunks), s.batch.microbatches, memory,
                       order);
  return fmt::format("{}, {} partition, m={} x {}, stages {}; {}", placement_name(s.placement, s.chunks),
                     s.partition_name, s.batch.microbatches, s.batch.microbatch_size, memory, order);
}

ScheduleCandidateReport AnytimeSearch::report(const ScheduleCandidate& c, const std::optional<Schedule>& order,
                                              bool unlimited) const {
  const Structure& s = structures_[c.structure];
  ScheduleCandidateReport r;
  r.name = "search";
  r.family = describe_candidate(c) + (order ? order_origin_ : "");
  r.costs = table_of(c);
  if (order) {
    r.schedule = with_memory_actions(*order, c);
  } else {
    CostTable limits = r.costs;
    if (unlimited) limits.memory_capacity.clear();
    std::optional<Schedule> built = build(c, limits);
    // Only candidates that were built before are reported, so this cannot fail on the search's own
    // costs; were it to, it is a bug to name, not an empty optional to read.
    if (!built) throw Error(fmt::format("search: could not rebuild its answer ({})", r.family));
    r.schedule = std::move(*built);
  }
  r.schedule.name = "search";
  r.partition = s.partition;
  r.batch = s.batch;
  r.decisions.assign(problem_.graph.nodes.size(), MemoryDecision::Keep);
  for (size_t v = 0; v < r.decisions.size(); ++v) {
    const uint8_t row = c.rows[s.partition.stage_of_node[v]];
    if (row != kKeep) r.decisions[v] = s.decisions[row][v];
  }
  simulate_report(r);
  return r;
}

void AnytimeSearch::finish() {
  result_.lower_bound = kInfinity;
  for (int i = 0; i < static_cast<int>(structures_.size()); ++i) {
    ScheduleCandidate c{i, std::vector<uint8_t>(structures_[i].rows.size(), kKeep), {}, -1, 0};
    for (bool split : {true, false}) {  // a whole B may cost less than I + W
      c.policy.split_backward = split;
      result_.lower_bound = std::min(result_.lower_bound, tight_bound_of(c));
    }
  }
  result_.lower_bound = std::min(result_.lower_bound, builtin_bound_);  // their placements may lie outside the space
  result_.evaluated += evaluated_;
  result_.pruned = pruned_;
  result_.stalled = stalled_;
  result_.found = best_.fits_any || best_builtin_ >= 0;
  if (best_builtin_ >= 0) {
    result_.best = result_.builtins[best_builtin_];
  } else if (best_.candidate) {
    result_.best = report(*best_.candidate, polished_);
  } else {
    result_.best = smallest_footprint();
  }
  if (!result_.found) result_.infeasible = what_would_fit();
  {
    std::lock_guard lock(mutex_);
    close_phase_locked();
  }
  result_.seconds = elapsed();
  if (options_.progress) options_.progress(progress());
}

// The least memory the space offers: every stage recomputing (or offloading) where it may, one
// micro-batch in flight per device, on the placement with one stage per device (or the first
// searched), scheduled as if memory were unlimited.
ScheduleCandidateReport AnytimeSearch::smallest_footprint() const {
  int structure = -1;
  for (int i = 0; i < static_cast<int>(structures_.size()) && structure < 0; ++i)
    if (structures_[i].placement == PlacementKind::Loop && structures_[i].chunks == 1)
      structure = i;  // the first: the compute-balanced cut
  structure = std::max(structure, 0);
  const Structure& s = structures_[structure];
  ScheduleCandidate c{structure, std::vector<uint8_t>(s.rows.size(), kKeep), {}, -1, 0};
  for (size_t k = 0; k < c.rows.size(); ++k)
    c.rows[k] = s.has_row[kRecompute] && row_acts(s, k, kRecompute) ? kRecompute
                : s.has_row[kOffload] && row_acts(s, k, kOffload)   ? kOffload
                                                                    : kKeep;
  c.policy.inflight.assign(problem_.devices, 1);
  CostTable unlimited = table_of(c);
  unlimited.memory_capacity.clear();
  // With several stages per device, a limit of one stalls the list scheduler: one micro-batch after
  // the other through the whole pipeline instead.
  std::optional<Schedule> order;
  if (!order_of(c, unlimited)) order = one_at_a_time(s.skeleton);
  ScheduleCandidateReport r = report(c, order, true);
  r.name = "smallest footprint";
  r.family = describe_candidate(c);
  r.costs.memory_capacity =
      problem_.stage_costs ? table_costs().memory_capacity : std::vector<double>{problem_.memory_limit};
  simulate_report(r);
  return r;
}

// The memory actions smallest_footprint() takes, for the message that says nothing fits.
std::string AnytimeSearch::smallest_footprint_actions() const {
  const ScheduleCandidateReport& r = result_.best;
  int recomputing = 0, offloading = 0;
  std::vector<char> seen(r.schedule.num_stages(), 0);
  for (const auto& list : r.schedule.device_actions)
    for (const Action& a : list) {
      if (a.stage < 0 || seen[a.stage] == 3) continue;
      if (a.kind == ActionKind::R && !(seen[a.stage] & 1)) seen[a.stage] |= 1, ++recomputing;
      if (a.kind == ActionKind::Offload && !(seen[a.stage] & 2)) seen[a.stage] |= 2, ++offloading;
    }
  const int stages = r.schedule.num_stages();
  if (recomputing == stages) return "every stage recomputing";
  std::string text;
  if (recomputing > 0) text = fmt::format("{} of {} stages recomputing", recomputing, stages);
  if (offloading > 0) text += fmt::format("{}{} offloading", text.empty() ? "" : ", ", offloading);
  if (text.empty()) text = "everything kept";
  const bool limited = !problem_.memory_choices || !problem_.recompute || !problem_.offload;
  return text + (limited                ? " (the memory actions searched)"
                 : problem_.stage_costs ? " (where the cost table gives their costs)"
                                        : "");
}

double AnytimeSearch::peak(const ScheduleCandidateReport& r) {
  return r.peak_memory.empty() ? kInfinity : *std::max_element(r.peak_memory.begin(), r.peak_memory.end());
}

// Nothing fits: say by how much, and what would change that.
std::string AnytimeSearch::what_would_fit() const {
  double total_static = 0;
  auto static_bytes = [](const StageCosts& row) {
    return row.parameter_bytes + row.gradient_bytes + row.optimizer_bytes;
  };
  for (const auto& row : structures_.front().rows) total_static += static_bytes(row[kKeep]);
  const std::vector<double> capacity = result_.best.costs.memory_capacity;
  const double limit = capacity.empty() ? kInfinity : *std::min_element(capacity.begin(), capacity.end());
  const int p = problem_.devices;
  const double smallest = peak(result_.best);
  // A graph's sizes are bytes, printed in the units the limit was given in; a table's are in its own
  // unit, printed bare when it names none.
  auto size = [&](double amount) {
    if (!problem_.stage_costs) return format_bytes(amount, problem_.byte_units);
    const std::string& unit = problem_.stage_costs->costs.memory_unit;
    return unit == "unit" ? fmt::format("{:.4g}", amount) : fmt::format("{:.4g} {}", amount, unit);
  };
  std::string text = fmt::format(
      "no schedule fits {} per device: even with {} and one micro-batch in flight per device, the fullest device "
      "needs {}",
      size(limit), smallest_footprint_actions(), size(smallest));
  if (total_static / p >= limit) {
    const int needed = static_cast<int>(std::ceil(total_static / limit));
    return text + fmt::format(
                      "; parameters, gradients and optimizer state alone take {}, so at least {} devices are needed "
                      "(have {})",
                      size(total_static), needed + 1, p);
  }
  double fixed = 0;
  if (!result_.best.costs.stages.empty()) {
    std::vector<double> per_device(p, 0);
    for (size_t k = 0; k < result_.best.costs.stages.size(); ++k) {
      per_device[result_.best.schedule.stage_device[k]] += static_bytes(result_.best.costs.stages[k]);
    }
    fixed = *std::max_element(per_device.begin(), per_device.end());
  }
  const double b = result_.best.batch.microbatch_size;
  const double smaller = std::floor(b * (limit - fixed) / std::max(smallest - fixed, 1e-300));
  if (smaller >= 1 && smaller < b)
    text +=
        fmt::format("; activations scale with the micro-batch: try a micro-batch of {} samples (now {})", smaller, b);
  else if (b > 1)
    text += fmt::format("; a smaller micro-batch (now {}) would help", b);
  return text + fmt::format("; or more devices (now {}) to spread parameters and activations", p);
}

}  // namespace flexpipe::search
