// The search space: structures (placements x partitions x batch splits) and what is enumerated on them.
#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "anytime_search.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/search/zero_bubble_heuristic.h"
#include "flexpipe/support/error.h"

namespace flexpipe::search {

namespace {

// Reference schedules: the partitioner reads in-flight counts from a built-in of the same placement.
Schedule reference_schedule(PlacementKind placement, int devices, int microbatches, int chunks) {
  if (placement == PlacementKind::V) return library_schedule("zb-v", {devices, microbatches, 0});
  if (placement == PlacementKind::Bidirectional) return library_schedule("dualpipe", {devices, microbatches, 0});
  if (chunks == 1) return library_schedule("1f1b", {devices, microbatches, 0});
  return library_schedule("interleaved-1f1b", {devices, microbatches, chunks});
}

std::optional<Schedule> reference_or_none(PlacementKind placement, int devices, int microbatches, int chunks) {
  try {
    return reference_schedule(placement, devices, microbatches, chunks);
  } catch (const Error&) {
    // Not a candidate's rejection: the schedule library says by Error that no built-in of this
    // placement runs at this m.
    return std::nullopt;
  }
}

}  // namespace

void AnytimeSearch::prepare_structures(bool dawn, MemorySolver solver) {
  if (problem_.stage_costs) {
    if (!dawn) prepare_table_structures();  // the table's stages are the partition
    return;
  }
  phase(dawn ? "partitioner's plans" : "partitions and costs");
  const int p = problem_.devices;
  const int ops = static_cast<int>(problem_.graph.nodes.size());
  struct Job {
    BatchSplit batch;
    PlacementKind placement;
    int chunks;
    bool dawn;
    int given = -1;  // index into problem_.partitions
  };
  std::vector<Job> jobs;
  for (const BatchSplit& batch : problem_.batches) {
    for (int v = 1; v <= std::max(1, problem_.max_chunks); ++v)
      if (v * p <= ops && placement_searched(PlacementKind::Loop, v))
        jobs.push_back({batch, PlacementKind::Loop, v, dawn});
    if (placement_searched(PlacementKind::V, 2) && 2 * p <= ops) jobs.push_back({batch, PlacementKind::V, 2, dawn});
    if (placement_searched(PlacementKind::Bidirectional, 1) && batch.microbatches > 1 && p <= ops)
      jobs.push_back({batch, PlacementKind::Bidirectional, 1, dawn});
  }
  // Given partitions (plans from `flexpipe partition`) on every placement with their stage count,
  // at the micro-batch size they were made for.
  const size_t placements = jobs.size();
  for (int g = 0; g < static_cast<int>(problem_.partitions.size()) && !dawn; ++g)
    for (size_t j = 0; j < placements; ++j) {
      const Job& job = jobs[j];
      const int stages = chunk_count(job.placement, job.chunks, p);
      const GivenPartition& given = problem_.partitions[g];
      if (given.partition.num_stages == stages && given.microbatch_size == job.batch.microbatch_size)
        jobs.push_back({job.batch, job.placement, job.chunks, false, g});
    }
  // Fewer stages first: the partitioner's exact memory solver is slowest on many small stages.
  std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return stages_per_device(a.placement, a.chunks) < stages_per_device(b.placement, b.chunks);
  });
  std::vector<std::optional<Structure>> made(jobs.size());
  std::vector<char> tried(jobs.size(), 0);
  const std::function<void(size_t)> make = [&](size_t i) {
    const Job& job = jobs[i];
    tried[i] = 1;
    made[i] = make_structure(job.batch, job.placement, job.chunks, job.dawn,
                             job.given >= 0 ? &problem_.partitions[job.given] : nullptr, solver);
  };
  // The cheap structures until the budget is spent (on a graph of 200 k operators each takes a tenth
  // of a second); however short the budget, the first, and on until one is made: a search needs one.
  parallel(jobs.size(), make, dawn ? 0 : 1);
  const auto none = [&] { return std::none_of(made.begin(), made.end(), [](const auto& s) { return s.has_value(); }); };
  for (size_t i = 0; !dawn && i < jobs.size() && none(); ++i)
    if (!tried[i]) make(i);
  for (auto& s : made)
    if (s) structures_.push_back(std::move(*s));
  const bool any_placement = placement_searched(PlacementKind::Loop, 1) || problem_.max_chunks >= 2 ||
                             placement_searched(PlacementKind::V, 2) ||
                             placement_searched(PlacementKind::Bidirectional, 1);
  if (structures_.empty() && !dawn && !any_placement)
    throw Error(fmt::format("search: no placement searched on {} devices (the families excluded every one)", p));
  if (structures_.empty() && !dawn)
    throw Error(fmt::format("search: '{}' has {} operators, too few for {} devices", problem_.graph.name, ops, p));
}

AggregationOptions AnytimeSearch::aggregation(const BatchSplit& batch) const {
  AggregationOptions a = problem_.aggregation;
  a.shape = {batch.microbatch_size, seq_len_};
  a.memory_capacity = {problem_.memory_limit};
  a.decisions.clear();
  return a;
}

bool AnytimeSearch::placement_searched(PlacementKind placement, int chunks) const {
  const bool several_devices = problem_.devices > 1;
  switch (placement) {
    case PlacementKind::Loop:
      if (chunks == 1) return problem_.single_stage_loop;
      return problem_.stage_costs ? problem_.max_chunks >= 2 : chunks <= problem_.max_chunks;
    case PlacementKind::V: return problem_.v_shape && several_devices;
    case PlacementKind::Bidirectional: return problem_.bidirectional && several_devices;
  }
  return false;
}

// A built-in may be the answer when its placement is one the search searches.
bool AnytimeSearch::builtin_placement_searched(const Schedule& builtin) const {
  const int p = problem_.devices, stages = builtin.stages_per_pipeline;
  if (builtin.num_pipelines > 1) return placement_searched(PlacementKind::Bidirectional, 1);
  if (p > 1 && stages == 2 * p && builtin.stage_device == v_placement(p, stages))
    return placement_searched(PlacementKind::V, 2);
  return stages % p == 0 && placement_searched(PlacementKind::Loop, stages / p);
}

Schedule AnytimeSearch::skeleton_of(const BatchSplit& batch, PlacementKind placement, int stages) const {
  const int p = problem_.devices;
  if (placement == PlacementKind::Bidirectional) {
    // DualPipe's pair of pipelines: the first half of the micro-batches down, the rest up.
    Schedule skeleton = make_schedule("search", p, batch.microbatches, bidirectional_placement(p), 2);
    for (int mb = 0; mb < batch.microbatches; ++mb)
      skeleton.microbatch_pipeline.push_back(mb < (batch.microbatches + 1) / 2 ? 0 : 1);
    return skeleton;
  }
  return make_schedule("search", p, batch.microbatches,
                       placement == PlacementKind::V ? v_placement(p, stages) : loop_placement(p, stages));
}

// A partitioner's memory decisions, one per operator in graph order, and per stage whether it
// offloads its checkpoints.
struct MemoryPlan {
  std::vector<MemoryDecision> decisions;
  std::vector<char> offload_checkpoints;

  void add(const PartitionResult& result) {
    for (const StageResult& stage : result.stages) {
      decisions.insert(decisions.end(), stage.memory.decisions.begin(), stage.memory.decisions.end());
      offload_checkpoints.push_back(stage.memory.offload_checkpoints);
    }
  }
  bool recomputes() const {
    return std::any_of(decisions.begin(), decisions.end(),
                       [](MemoryDecision d) { return d == MemoryDecision::Recompute; });
  }
  bool keeps_everything() const {
    return std::all_of(decisions.begin(), decisions.end(), [](MemoryDecision d) { return d == MemoryDecision::Keep; });
  }
};

// DawnPiper's partition for the placement's own in-flight counts. The auto solver differs from the
// greedy only on ranges of up to kExactSolverOperators: where the greedy's run optimized none, the
// auto's would repeat it call for call (seconds on the README's example), so its plan is the greedy's.
PartitionResult AnytimeSearch::dawn_partition(const BatchSplit& batch, PlacementKind placement, int chunks,
                                              double host_bandwidth, MemorySolver solver) const {
  const auto key = std::make_tuple(batch.microbatches, batch.microbatch_size, static_cast<int>(placement), chunks);
  if (solver == MemorySolver::Auto) {
    std::lock_guard lock(greedy_plans_mutex_);
    const auto it = greedy_plans_.find(key);
    if (it != greedy_plans_.end() && it->second.smallest_optimized > kExactSolverOperators) return it->second;
  }
  const Schedule reference = reference_schedule(placement, problem_.devices, batch.microbatches, chunks);
  PartitionProblem pp = make_partition_problem(problem_.graph, Shape{batch.microbatch_size, seq_len_}, reference,
                                               problem_.memory_limit, host_bandwidth);
  pp.solver = solver;
  pp.should_stop = [this] { return partitioner_should_stop(); };
  pp.measure_shortfall = false;  // a placement that cannot fit is skipped
  PartitionResult result = partition_model(pp, PartitionMethod::Dawn);
  if (solver == MemorySolver::Greedy && !out_of_time()) {  // not cut short by the budget
    std::lock_guard lock(greedy_plans_mutex_);
    greedy_plans_[key] = result;
  }
  return result;
}

// The compute-balanced cut (PipeDream's planner over the cuts where little crosses), or DawnPiper's
// plan for the placement's own in-flight counts.
std::optional<Structure> AnytimeSearch::make_structure(const BatchSplit& batch, PlacementKind placement, int chunks,
                                                       bool dawn, const GivenPartition* given,
                                                       MemorySolver solver) const {
  const int p = problem_.devices, stages = chunk_count(placement, chunks, p);
  Structure s;
  s.batch = batch;
  s.placement = placement;
  s.chunks = chunks;
  s.partition_name = given                            ? given->name
                     : !dawn                          ? "balanced"
                     : solver == MemorySolver::Greedy ? "dawn (greedy)"
                                                      : "dawn";
  s.skeleton = skeleton_of(batch, placement, stages);
  const Shape shape{batch.microbatch_size, seq_len_};
  const double host = problem_.aggregation.host_link.bandwidth;
  const double host_bandwidth = std::isfinite(host) && problem_.offload ? host : 0;
  MemoryPlan plan;
  try {
    if (given) {
      check_partition(problem_.graph, given->partition);
      s.partition = given->partition;
      plan.decisions = given->decisions;
      plan.offload_checkpoints = given->offload_checkpoints;
    } else if (dawn) {
      const PartitionResult r = dawn_partition(batch, placement, chunks, host_bandwidth, solver);
      if (!r.fits) return std::nullopt;
      s.partition = partition_from_starts(problem_.graph, r.starts());
      plan.add(r);
    } else {
      s.partition = balanced_partition(stages, batch, shape, host_bandwidth);
      // The same cuts with each stage's memory decisions chosen for the placement's in-flight counts,
      // when a built-in of the placement runs at this m.
      // (Not once the budget is spent: on large graphs that takes longer than the structure.)
      const std::optional<Schedule> reference =
          problem_.memory_choices && problem_.memory_limit < kInfinity && !out_of_time()
              ? reference_or_none(placement, p, batch.microbatches, chunks)
              : std::nullopt;
      if (reference) {
        PartitionProblem pp =
            make_partition_problem(problem_.graph, shape, *reference, problem_.memory_limit, host_bandwidth);
        pp.should_stop = [this] { return partitioner_should_stop(); };
        const PartitionResult r = evaluate_partition(pp, stage_starts(s.partition), true);
        if (r.fits) plan.add(r);
      }
    }
  } catch (const Error&) {
    // Not a candidate's rejection: the partitioner and the built-in references say by Error that the
    // placement does not suit m (or the graph), and other structures cover it.
    return std::nullopt;
  }
  if (plan.offload_checkpoints.empty()) plan.offload_checkpoints.assign(stages, 0);
  if (static_cast<int>(plan.offload_checkpoints.size()) != stages) return std::nullopt;  // a plan for other stages
  if (dawn && plan.recomputes() && !problem_.recompute) return std::nullopt;             // cuts made for recomputing
  add_cost_rows(s, plan, host_bandwidth);
  return s;
}

// Each memory row's stage costs: everything kept, recomputed or offloaded, and the plan's own
// decisions where it has any.
void AnytimeSearch::add_cost_rows(Structure& s, const MemoryPlan& plan, double host_bandwidth) const {
  const int n = static_cast<int>(problem_.graph.nodes.size());
  const int stages = s.partition.num_stages;
  s.rows.resize(stages);
  s.recomputes.assign(stages, {});
  s.offloads.assign(stages, {});
  s.plan_offloads_checkpoints.assign(stages, 0);
  const bool plan_recomputes = plan.recomputes();
  for (int r = 0; r < kRows; ++r) {
    if (r == kOffload && host_bandwidth <= 0) continue;
    if (r == kRecompute && !problem_.recompute) continue;
    if (r == kPlan && (plan.decisions.empty() || plan.keeps_everything() || (plan_recomputes && !problem_.recompute)))
      continue;
    std::vector<MemoryDecision>& decisions = s.decisions[r];
    if (r == kPlan)
      decisions = plan.decisions;
    else
      decisions.assign(n, r == kKeep        ? MemoryDecision::Keep
                          : r == kRecompute ? MemoryDecision::Recompute
                                            : MemoryDecision::Offload);
    AggregationOptions a = aggregation(s.batch);
    a.decisions = decisions;
    if (r == kPlan) a.offload_checkpoints = plan.offload_checkpoints;
    const StageAggregate aggregate = aggregate_stages(problem_.graph, s.partition, a);
    if (r == kKeep) s.base = aggregate.table;
    for (int k = 0; k < stages; ++k) s.rows[k][r] = aggregate.table.stages[k];
    for (int v = 0; v < n; ++v) {
      const int k = s.partition.stage_of_node[v];
      s.recomputes[k][r] |= decisions[v] == MemoryDecision::Recompute;
      s.offloads[k][r] |= decisions[v] == MemoryDecision::Offload;
    }
    if (r == kPlan)
      for (int k = 0; k < stages; ++k) {
        s.plan_offloads_checkpoints[k] = plan.offload_checkpoints[k] && s.recomputes[k][r];
        s.offloads[k][r] |= s.plan_offloads_checkpoints[k];
      }
    s.has_row[r] = true;
  }
}

Partition AnytimeSearch::balanced_partition(int stages, const BatchSplit& batch, const Shape& shape,
                                            double host_bandwidth) const {
  const std::string key = fmt::format("{}/{}", stages, batch.microbatch_size);
  {
    std::lock_guard lock(mutex_);
    if (auto it = balanced_.find(key); it != balanced_.end()) return it->second;
  }
  // Any schedule with `stages` chunks serves: the compute-balanced planner reads no in-flight counts.
  const Schedule reference = library_schedule("gpipe", {stages, 1, 0});
  const PartitionProblem pp = make_partition_problem(problem_.graph, shape, reference, kInfinity, host_bandwidth);
  Partition partition = partition_from_starts(problem_.graph, partition_model(pp, PartitionMethod::PipeDream).starts());
  std::lock_guard lock(mutex_);
  balanced_.emplace(key, partition);
  return partition;
}

// Per-device in-flight limits: none (memory decides), and the placement's 1F1B-like depth plus a
// little, so that the split backward's W can fill the bubbles as in ZB-H1 / ZB-H2.
std::vector<std::vector<int>> AnytimeSearch::inflight_profiles(const Structure& s) const {
  const int p = problem_.devices, m = s.batch.microbatches, v = stages_per_device(s.placement, s.chunks);
  std::vector<std::vector<int>> profiles = {{}};
  for (int extra : {0, 1, 2, p / 2, p}) {
    std::vector<int> limits(p);
    for (int d = 0; d < p; ++d) {
      // 1F1B's depth on each leg: p - d down and d + 1 up on the bidirectional pair.
      const int base = s.placement == PlacementKind::Bidirectional ? p + 1
                       : s.placement == PlacementKind::V           ? 2 * (p - d)
                       : v == 1                                    ? p - d
                                                                   : (v - 1) * p + 2 * (p - d - 1) + 1;
      limits[d] = std::clamp(base + extra, 1, v * m);
    }
    if (std::find(profiles.begin(), profiles.end(), limits) == profiles.end()) profiles.push_back(limits);
  }
  // The same depth on every device (ZB-H1 holds p everywhere, ZB-H2 2p - 1): later devices fill
  // their bubbles with deferred W's.
  const int deepest = *std::max_element(profiles[1].begin(), profiles[1].end());
  for (int depth : {deepest, deepest + p / 2, deepest + p - 1}) {
    std::vector<int> limits(p, std::clamp(depth, 1, v * m));
    if (std::find(profiles.begin(), profiles.end(), limits) == profiles.end()) profiles.push_back(limits);
  }
  return profiles;
}

std::vector<ListPolicy> AnytimeSearch::policies(const Structure& s, bool split) const {
  std::vector<ListPolicy> out;
  const bool several = stages_per_device(s.placement, s.chunks) > 1;
  for (const std::vector<int>& inflight : inflight_profiles(s))
    for (bool backward_first : {true, false})
      for (WeightTiming weight : {WeightTiming::FillIdle, WeightTiming::Late}) {
        if (!split && weight == WeightTiming::Late) continue;
        for (ForwardOrder forward : {ForwardOrder::Oldest, ForwardOrder::Shallow}) {
          if (!several && forward == ForwardOrder::Shallow) continue;
          if (!backward_first && !inflight.empty()) continue;  // forwards first with a depth limit is 1F1B again
          out.push_back({split, backward_first, weight, forward, inflight});
        }
      }
  return out;
}

// Memory choices to start from: everything kept, everything recomputed, the front half of the
// devices recomputing (they hold the most micro-batches), everything offloaded, and DawnPiper's plan.
// (A table's stages recompute and offload only where it gives their costs: the others keep.)
std::vector<std::vector<uint8_t>> AnytimeSearch::row_patterns(const Structure& s) const {
  const int stages = static_cast<int>(s.rows.size());
  std::vector<std::vector<uint8_t>> out;
  if (s.partition_name != "balanced" && s.partition_name != kTablePartition)
    return {std::vector<uint8_t>(stages, s.has_row[kPlan] ? kPlan : kKeep)};
  if (s.has_row[kPlan]) out.push_back(std::vector<uint8_t>(stages, kPlan));
  out.push_back(std::vector<uint8_t>(stages, kKeep));
  if (!problem_.memory_choices) return out;
  auto add = [&](Row row, auto chosen) {
    if (!s.has_row[row]) return;
    std::vector<uint8_t> rows(stages, kKeep);
    for (int k = 0; k < stages; ++k)
      if (chosen(k) && row_acts(s, k, row)) rows[k] = row;
    if (std::find(out.begin(), out.end(), rows) == out.end()) out.push_back(rows);
  };
  add(kRecompute, [](int) { return true; });
  if (problem_.devices > 1) add(kRecompute, [&](int k) { return s.skeleton.stage_device[k] < problem_.devices / 2; });
  add(kOffload, [](int) { return true; });
  return out;
}

// Zero Bubble's heuristic orders one stage per device on one pipeline, everything kept.
bool AnytimeSearch::zero_bubble_applies(const Structure& s) const {
  return s.placement == PlacementKind::Loop && s.chunks == 1 && s.skeleton.num_pipelines == 1 && s.has_row[kKeep];
}

std::vector<ScheduleCandidate> AnytimeSearch::seed_candidates(size_t first) const {
  std::vector<ScheduleCandidate> out;
  for (int i = static_cast<int>(first); i < static_cast<int>(structures_.size()); ++i) {
    const Structure& s = structures_[i];
    for (const std::vector<uint8_t>& rows : row_patterns(s))
      for (bool split : {true, false})
        for (const ListPolicy& policy : policies(s, split)) {
          ScheduleCandidate c{i, rows, policy, -1, 0};
          c.lower_bound = lower_bound_of(c);
          out.push_back(std::move(c));
        }
    // The heuristic's eight variants: the search's answer is never slower than its best.
    for (int8_t variant = 0; zero_bubble_applies(s) && variant < int8_t(zero_bubble_variants().size()); ++variant) {
      ScheduleCandidate c{i, std::vector<uint8_t>(s.rows.size(), kKeep), {}, variant, 0};
      c.policy.split_backward = true;
      c.lower_bound = lower_bound_of(c);
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace flexpipe::search
