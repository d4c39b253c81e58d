#include "flexpipe/search/search.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "flexpipe/schedules/builtin.h"
#include "flexpipe/schedules/library.h"
#include "flexpipe/support/error.h"
#include "flexpipe/search/exact_schedule.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/ir/memory_actions.h"
#include "flexpipe/partition/partitioner.h"

namespace flexpipe {

namespace {

using Clock = std::chrono::steady_clock;

// What a stage does with the tensors its forward saves: one cost-table row per choice.
enum Row : uint8_t { kKeep = 0, kRecompute = 1, kOffload = 2, kPlan = 3, kRows = 4 };
constexpr const char* kRowNames[kRows] = {"keep", "recompute", "offload", "plan"};

// How a structure lays its stages on the devices; with a loop's chunk count it makes the placement.
enum class PlacementKind : uint8_t { Loop, V, Bidirectional };

// Model chunks (stages of one pipeline) of a placement on p devices; stages each device holds.
int chunk_count(PlacementKind placement, int chunks, int p) {
  return placement == PlacementKind::V ? 2 * p : placement == PlacementKind::Bidirectional ? p : chunks * p;
}
int stages_per_device(PlacementKind placement, int chunks) { return placement == PlacementKind::Loop ? chunks : 2; }

// A placement, a partition and a batch split: everything but the memory choices and the order.
struct Structure {
  BatchSplit batch;
  PlacementKind placement = PlacementKind::Loop;
  int chunks = 1;
  std::string partition_name;  // "balanced", "dawn", "dawn (greedy)" or a given plan's name
  Schedule skeleton;           // placement and micro-batches, no actions
  Partition partition;
  CostTable base;              // links and capacity; stages filled from `rows` per candidate
  std::vector<std::array<StageCosts, kRows>> rows;  // per stage
  std::array<bool, kRows> has_row{};
  std::array<std::vector<MemoryDecision>, kRows> decisions;  // per graph node, per row kind
  std::vector<std::array<char, kRows>> recomputes, offloads;  // per stage: whether that row does
  // Per stage: whether the plan row offloads the recompute checkpoints (RELOAD right before R).
  std::vector<char> plan_offloads_checkpoints;
};

// What one simulation evaluates: a structure, its memory rows and a list policy (reported as a
// ScheduleCandidateReport).
struct ScheduleCandidate {
  int structure = 0;
  std::vector<uint8_t> rows;  // per stage
  ListPolicy policy;
  double lower_bound = 0;
  int64_t order = 0;  // tie-break: earlier candidates win equal makespans, so results are reproducible
};

// Most promising first: the order candidates are tried in.
bool lower_bound_first(const ScheduleCandidate& a, const ScheduleCandidate& b) { return a.lower_bound < b.lower_bound; }

struct Evaluation {
  bool fits = false;
  double makespan = kInfinity;
};

std::string placement_name(PlacementKind placement, int chunks) {
  if (placement == PlacementKind::Bidirectional) return "bidirectional";
  return placement == PlacementKind::V ? "V-shape" : chunks == 1 ? "loop" : fmt::format("loop v={}", chunks);
}

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

// The search over structures and list policies (exact_schedule.cpp's BranchAndBound settles the orders
// of the small ones), improving its answer until the budget runs out.
class AnytimeSearch {
 public:
  AnytimeSearch(const SearchProblem& problem, const SearchOptions& options)
      : problem_(problem), options_(options), start_(Clock::now()) {
    if (problem.devices < 1) throw Error(fmt::format("search: {} devices; at least 1", problem.devices));
    if (problem.batches.empty()) throw Error("search: no batch split to search");
    for (const BatchSplit& b : problem.batches)
      if (b.microbatches < 1 || !(b.microbatch_size > 0))
        throw Error(fmt::format("search: {} micro-batches of {} samples is not a batch", b.microbatches, b.microbatch_size));
    if (!(problem.memory_limit > 0)) throw Error("search: the memory limit must be positive");
    seq_len_ = problem.seq_len > 0 ? problem.seq_len : problem.graph.reference.seq_len;
    threads_ = std::max(1, options.threads);
  }

  SearchResult run() {
    // Cheap structures first and a first local search on them, so that a short budget still sees
    // every placement; DawnPiper's plans (a partitioner run per placement, slow on tight budgets)
    // after them, cheapest placements first, then a second local search.
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

 private:
  // Evaluates the seed candidates of structures [first, end), lowest lower bound first.
  void run_seeds(size_t first, std::vector<ScheduleCandidate>& seeds, std::vector<std::pair<double, int>>& finished) {
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

  // Hill climbing from the best seeds among seeds[first..].
  void climb_from(const std::vector<ScheduleCandidate>& seeds, const std::vector<std::pair<double, int>>& finished,
                  size_t first) {
    if (!options_.local_search || out_of_time()) return;
    phase("local search");
    std::vector<std::pair<double, int>> ranked(finished.begin() + static_cast<long>(first), finished.end());
    std::sort(ranked.begin(), ranked.end());
    // The best seeds overall, then the best seed of every other structure whose bound is below the
    // best so far, most promising bound first: a structure may hold the answer even when its first
    // candidates were not the fastest.
    std::vector<ScheduleCandidate> starts;
    std::vector<char> started(structures_.size(), 0);
    for (const auto& [makespan, i] : ranked) {
      if (makespan == kInfinity || starts.size() >= static_cast<size_t>(4 + 2 * threads_)) break;
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
    for (const ScheduleCandidate& c : others)
      if (c.lower_bound < best_makespan()) starts.push_back(c);
    parallel(starts.size(), [&](size_t i) { climb(starts[i], first + i); });
  }

  // ---- structures: placements x partitions x batch splits, with their cost rows -------------------
  void prepare_structures(bool dawn, MemorySolver solver = MemorySolver::Auto) {
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
      for (int v = 1; v <= problem_.max_chunks; ++v)
        if (v * p <= ops) jobs.push_back({batch, PlacementKind::Loop, v, dawn});
      if (problem_.v_shape && p > 1 && 2 * p <= ops) jobs.push_back({batch, PlacementKind::V, 2, dawn});
      if (problem_.bidirectional && p > 1 && batch.microbatches > 1 && p <= ops)
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
    parallel(jobs.size(), [&](size_t i) {
      const Job& job = jobs[i];
      made[i] = make_structure(job.batch, job.placement, job.chunks, job.dawn,
                               job.given >= 0 ? &problem_.partitions[job.given] : nullptr, solver);
    }, /*timed=*/dawn);
    for (auto& s : made)
      if (s) structures_.push_back(std::move(*s));
    if (structures_.empty() && !dawn)
      throw Error(fmt::format("search: '{}' has {} operators, too few for {} devices", problem_.graph.name, ops, p));
  }

  AggregationOptions aggregation(const BatchSplit& batch) const {
    AggregationOptions a = problem_.aggregation;
    a.shape = {batch.microbatch_size, seq_len_};
    a.memory_capacity = {problem_.memory_limit};
    a.decisions.clear();
    return a;
  }

  // The compute-balanced cut (PipeDream's planner over the cuts where little crosses), or DawnPiper's
  // plan for the placement's own in-flight counts.
  std::optional<Structure> make_structure(const BatchSplit& batch, PlacementKind placement, int chunks, bool dawn,
                                          const GivenPartition* given, MemorySolver solver) const {
    const int p = problem_.devices, stages = chunk_count(placement, chunks, p);
    Structure s;
    s.batch = batch;
    s.placement = placement;
    s.chunks = chunks;
    s.partition_name = given                                    ? given->name
                       : !dawn                                  ? "balanced"
                       : solver == MemorySolver::Greedy ? "dawn (greedy)"
                                                                : "dawn";
    if (placement == PlacementKind::Bidirectional) {
      // DualPipe's pair of pipelines: the first half of the micro-batches down, the rest up.
      s.skeleton = make_schedule("search", p, batch.microbatches, bidirectional_placement(p), 2);
      for (int mb = 0; mb < batch.microbatches; ++mb)
        s.skeleton.microbatch_pipeline.push_back(mb < (batch.microbatches + 1) / 2 ? 0 : 1);
    } else {
      s.skeleton = make_schedule("search", p, batch.microbatches,
                                 placement == PlacementKind::V ? v_placement(p, stages) : loop_placement(p, stages));
    }
    const Shape shape{batch.microbatch_size, seq_len_};
    const double host = problem_.aggregation.host_link.bandwidth;
    const double host_bandwidth = std::isfinite(host) ? host : 0;
    std::vector<MemoryDecision> plan;
    std::vector<char> plan_checkpoints;  // per stage: the plan offloads its checkpoints
    try {
      if (given) {
        check_partition(problem_.graph, given->partition);
        s.partition = given->partition;
        plan = given->decisions;
        plan_checkpoints = given->offload_checkpoints;
      } else if (dawn) {
        const Schedule reference = reference_schedule(placement, p, batch.microbatches, chunks);
        PartitionProblem pp = make_partition_problem(problem_.graph, shape, reference, problem_.memory_limit, host_bandwidth);
        pp.solver = solver;
        pp.should_stop = [this] { return out_of_time(); };
        pp.measure_shortfall = false;  // a placement that cannot fit is skipped
        const PartitionResult r = partition_model(pp, PartitionMethod::Dawn);
        if (!r.fits) return std::nullopt;
        const std::vector<int> starts = r.starts();
        std::vector<int> sizes;
        for (size_t k = 0; k + 1 < starts.size(); ++k) sizes.push_back(starts[k + 1] - starts[k]);
        s.partition = partition_from_sizes(problem_.graph, sizes);
        for (const StageResult& stage : r.stages) {
          plan.insert(plan.end(), stage.memory.decisions.begin(), stage.memory.decisions.end());
          plan_checkpoints.push_back(stage.memory.offload_checkpoints);
        }
      } else {
        s.partition = balanced_partition(stages, batch, shape, host_bandwidth);
        // The same cuts with each stage's memory decisions chosen for the placement's in-flight counts,
        // when a built-in of the placement runs at this m.
        const std::optional<Schedule> reference =
            problem_.memory_choices && problem_.memory_limit < kInfinity
                ? reference_or_none(placement, p, batch.microbatches, chunks)
                : std::nullopt;
        if (reference) {
          const PartitionProblem pp =
              make_partition_problem(problem_.graph, shape, *reference, problem_.memory_limit, host_bandwidth);
          std::vector<int> starts(1, 0);
          for (int v = 1; v < static_cast<int>(s.partition.stage_of_node.size()); ++v)
            if (s.partition.stage_of_node[v] != s.partition.stage_of_node[v - 1]) starts.push_back(v);
          starts.push_back(static_cast<int>(s.partition.stage_of_node.size()));
          const PartitionResult r = evaluate_partition(pp, starts, true);
          if (r.fits)
            for (const StageResult& stage : r.stages) {
              plan.insert(plan.end(), stage.memory.decisions.begin(), stage.memory.decisions.end());
              plan_checkpoints.push_back(stage.memory.offload_checkpoints);
            }
        }
      }
    } catch (const Error&) {
      // Not a candidate's rejection: the partitioner and the built-in references say by Error that the
      // placement does not suit m (or the graph), and other structures cover it.
      return std::nullopt;
    }
    const int n = static_cast<int>(problem_.graph.nodes.size());
    s.rows.resize(stages);
    s.recomputes.assign(stages, {});
    s.offloads.assign(stages, {});
    if (plan_checkpoints.empty()) plan_checkpoints.assign(stages, 0);
    if (static_cast<int>(plan_checkpoints.size()) != stages) return std::nullopt;  // a plan for other stages
    s.plan_offloads_checkpoints.assign(stages, 0);
    for (int r = 0; r < kRows; ++r) {
      if (r == kOffload && host_bandwidth <= 0) continue;
      if (r == kPlan && plan.empty()) continue;
      if (r == kPlan && std::all_of(plan.begin(), plan.end(), [](MemoryDecision d) { return d == MemoryDecision::Keep; }))
        continue;
      std::vector<MemoryDecision>& decisions = s.decisions[r];
      if (r == kPlan) decisions = plan;
      else
        decisions.assign(n, r == kKeep ? MemoryDecision::Keep : r == kRecompute ? MemoryDecision::Recompute : MemoryDecision::Offload);
      AggregationOptions a = aggregation(batch);
      a.decisions = decisions;
      if (r == kPlan) a.offload_checkpoints = plan_checkpoints;
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
          s.plan_offloads_checkpoints[k] = plan_checkpoints[k] && s.recomputes[k][r];
          s.offloads[k][r] |= s.plan_offloads_checkpoints[k];
        }
      s.has_row[r] = true;
    }
    return s;
  }

  Partition balanced_partition(int stages, const BatchSplit& batch, const Shape& shape, double host_bandwidth) const {
    const std::string key = fmt::format("{}/{}", stages, batch.microbatch_size);
    {
      std::lock_guard lock(mutex_);
      if (auto it = balanced_.find(key); it != balanced_.end()) return it->second;
    }
    // Any schedule with `stages` chunks serves: the compute-balanced planner reads no in-flight counts.
    const Schedule reference = library_schedule("gpipe", {stages, 1, 0});
    const PartitionProblem pp = make_partition_problem(problem_.graph, shape, reference, kInfinity, host_bandwidth);
    const std::vector<int> starts = partition_model(pp, PartitionMethod::PipeDream).starts();
    std::vector<int> sizes;
    for (size_t k = 0; k + 1 < starts.size(); ++k) sizes.push_back(starts[k + 1] - starts[k]);
    Partition partition = partition_from_sizes(problem_.graph, sizes);
    std::lock_guard lock(mutex_);
    balanced_.emplace(key, partition);
    return partition;
  }

  // ---- built-ins: reported under the same costs, and candidates like any other -------------------
  void report_builtins() {
    phase("built-ins");
    const BatchSplit batch = problem_.batches.front();
    for (const BuiltinSchedule& builtin : builtin_schedules()) {
      ScheduleCandidateReport r;
      r.name = builtin.name;
      r.batch = batch;
      try {
        r.schedule = library_schedule(builtin.name, {problem_.devices, batch.microbatches, 0});
        r.family = fmt::format("built-in {}", builtin.name);
        const Shape shape{batch.microbatch_size, seq_len_};
        const double host = problem_.aggregation.host_link.bandwidth;
        r.partition = balanced_partition(r.schedule.stages_per_pipeline, batch, shape, std::isfinite(host) ? host : 0);
        r.decisions.assign(problem_.graph.nodes.size(), MemoryDecision::Keep);
        r.costs = aggregate_stages(problem_.graph, r.partition, aggregation(batch)).table;
        simulate_report(r);
        ++result_.evaluated;
        const std::vector<char> split_stages = split_backward_stages(r.schedule);
        const bool split = std::find(split_stages.begin(), split_stages.end(), 1) != split_stages.end();
        builtin_bound_ = std::min(builtin_bound_, r.costs.overlap_ratio >= 1
                                                      ? schedule_lower_bound(r.schedule, r.costs, split, {})
                                                      : r.lower_bound);
      } catch (const Error& e) {
        // Not a candidate's rejection: the report says why the built-in does not run here.
        r.skipped = e.what();
        r.schedule = {};
      }
      if (options_.builtin_candidates && r.skipped.empty() && r.fits && r.makespan < best_.makespan) {
        best_.makespan = r.makespan;
        best_builtin_ = static_cast<int>(result_.builtins.size());
        record_improvement(r.family);
      }
      result_.builtins.push_back(std::move(r));
    }
  }

  void simulate_report(ScheduleCandidateReport& r) const {
    const SimResult sim = simulate(lower(r.schedule), r.costs, {.record_timeline = false, .record_memory = false});
    r.makespan = sim.makespan;
    r.bubble_ratio = sim.bubble_ratio;
    r.lower_bound = sim.lower_bound;
    r.fits = sim.fits;
    r.peak_memory.clear();
    for (const DeviceReport& d : sim.devices) r.peak_memory.push_back(d.peak_memory);
  }

  // ---- candidates -------------------------------------------------------------------------------
  // Per-device in-flight limits: none (memory decides), and the placement's 1F1B-like depth plus a
  // little, so that the split backward's W can fill the bubbles as in ZB-H1 / ZB-H2.
  std::vector<std::vector<int>> inflight_profiles(const Structure& s) const {
    const int p = problem_.devices, m = s.batch.microbatches, v = stages_per_device(s.placement, s.chunks);
    std::vector<std::vector<int>> profiles = {{}};
    for (int extra : {0, 1, 2, p / 2, p}) {
      std::vector<int> limits(p);
      for (int d = 0; d < p; ++d) {
        // 1F1B's depth on each leg: p - d down and d + 1 up on the bidirectional pair.
        const int base = s.placement == PlacementKind::Bidirectional ? p + 1
                         : s.placement == PlacementKind::V           ? 2 * (p - d)
                         : v == 1                                 ? p - d
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

  std::vector<ListPolicy> policies(const Structure& s, bool split) const {
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
  std::vector<std::vector<uint8_t>> row_patterns(const Structure& s) const {
    const int stages = static_cast<int>(s.rows.size());
    std::vector<std::vector<uint8_t>> out;
    if (s.partition_name != "balanced") return {std::vector<uint8_t>(stages, s.has_row[kPlan] ? kPlan : kKeep)};
    if (s.has_row[kPlan]) out.push_back(std::vector<uint8_t>(stages, kPlan));
    out.push_back(std::vector<uint8_t>(stages, kKeep));
    if (!problem_.memory_choices) return out;
    out.push_back(std::vector<uint8_t>(stages, kRecompute));
    if (problem_.devices > 1) {
      std::vector<uint8_t> front(stages, kKeep);
      for (int k = 0; k < stages; ++k)
        if (s.skeleton.stage_device[k] < problem_.devices / 2) front[k] = kRecompute;
      out.push_back(front);
    }
    if (s.has_row[kOffload]) out.push_back(std::vector<uint8_t>(stages, kOffload));
    return out;
  }

  std::vector<ScheduleCandidate> seed_candidates(size_t first) const {
    std::vector<ScheduleCandidate> out;
    for (int i = static_cast<int>(first); i < static_cast<int>(structures_.size()); ++i) {
      const Structure& s = structures_[i];
      for (const std::vector<uint8_t>& rows : row_patterns(s))
        for (bool split : {true, false})
          for (const ListPolicy& policy : policies(s, split)) {
            ScheduleCandidate c{i, rows, policy, 0, 0};
            c.lower_bound = lower_bound_of(c);
            out.push_back(std::move(c));
          }
    }
    return out;
  }

  CostTable table_of(const ScheduleCandidate& c) const {
    const Structure& s = structures_[c.structure];
    CostTable table = s.base;
    for (size_t k = 0; k < c.rows.size(); ++k) table.stages[k] = s.rows[k][c.rows[k]];
    return table;
  }

  enum class Flag { Recompute, Offload, ReloadBeforeRecompute };
  // Per global stage (every pipeline's copy of a chunk decides alike).
  std::vector<char> flags(const ScheduleCandidate& c, Flag which) const {
    const Structure& s = structures_[c.structure];
    std::vector<char> out(s.skeleton.num_stages());
    for (size_t g = 0; g < out.size(); ++g) {
      const int k = s.skeleton.chunk_of_stage(static_cast<int>(g));
      const uint8_t row = c.rows[k];
      out[g] = which == Flag::Recompute ? s.recomputes[k][row]
               : which == Flag::Offload ? s.offloads[k][row]
                                        : row == kPlan && s.plan_offloads_checkpoints[k];
    }
    return out;
  }

  // What ranks and prunes candidates: the closed-form bound, cheap enough for every candidate.
  double lower_bound_of(const ScheduleCandidate& c) const {
    return schedule_path_bound(structures_[c.structure].skeleton, table_of(c), c.policy.split_backward,
                               flags(c, Flag::Recompute));
  }

  // What proofs and the reported space bound use: the full bound (a preemptive schedule per device),
  // computed once per structure, memory rows and backward kind.
  double tight_bound_of(const ScheduleCandidate& c) const {
    auto key = std::make_tuple(c.structure, c.rows, c.policy.split_backward);
    {
      std::lock_guard lock(bounds_mutex_);
      if (auto found = bounds_.find(key); found != bounds_.end()) return found->second;
    }
    const double bound =
        schedule_lower_bound(structures_[c.structure].skeleton, table_of(c), c.policy.split_backward,
                             flags(c, Flag::Recompute));
    std::lock_guard lock(bounds_mutex_);
    bounds_.emplace(std::move(key), bound);
    return bound;
  }

  // The list scheduler's compute-only order for the candidate; nothing when its policy stalls.
  std::optional<Schedule> order_of(const ScheduleCandidate& c, const CostTable& table) const {
    Schedule order = structures_[c.structure].skeleton;
    if (!list_schedule(order, table, c.policy, flags(c, Flag::Recompute), flags(c, Flag::Offload))) return std::nullopt;
    return order;
  }

  // A compute-only order of the candidate's structure with its R / OFFLOAD / RELOAD placed.
  Schedule with_memory_actions(const Schedule& order, const ScheduleCandidate& c) const {
    const std::vector<char> recompute = flags(c, Flag::Recompute), offload = flags(c, Flag::Offload);
    const bool any = std::any_of(recompute.begin(), recompute.end(), [](char f) { return f; }) ||
                     std::any_of(offload.begin(), offload.end(), [](char f) { return f; });
    return any ? add_memory_actions(order, recompute, offload, flags(c, Flag::ReloadBeforeRecompute)) : order;
  }

  // The candidate's schedule: the list scheduler's order with R / OFFLOAD / RELOAD placed.
  std::optional<Schedule> build(const ScheduleCandidate& c, const CostTable& table) const {
    std::optional<Schedule> order = order_of(c, table);
    if (order) order = with_memory_actions(*order, c);
    return order;
  }

  Evaluation evaluate(const ScheduleCandidate& c) {
    Evaluation e;
    if (out_of_time()) return e;
    if (c.lower_bound >= best_makespan()) {
      ++pruned_;
      return e;
    }
    const CostTable table = table_of(c);
    const std::optional<Schedule> schedule = build(c, table);
    ++evaluated_;
    if (!schedule) {
      ++stalled_;
      return e;
    }
    const SimResult sim = simulate(lower(*schedule), table, {.record_timeline = false, .record_memory = false});
    e.fits = sim.fits;
    e.makespan = sim.makespan;
    offer(c, e);
    return e;
  }

  void offer(const ScheduleCandidate& c, const Evaluation& e) {
    std::lock_guard lock(mutex_);
    if (!e.fits) return;
    best_.fits_any = true;
    if (e.makespan < best_.makespan || (e.makespan == best_.makespan && best_.candidate && c.order < best_.candidate->order)) {
      const bool better = e.makespan < best_.makespan;
      best_.makespan = e.makespan;
      best_.candidate = c;
      best_builtin_ = -1;
      polished_.reset();
      if (better) record_improvement_locked(describe_candidate(c));
    }
    // The best few of different structures: the starts of the order polishing.
    auto same = std::find_if(top_.begin(), top_.end(), [&](const auto& t) { return t.second.structure == c.structure; });
    if (same != top_.end() && same->first <= e.makespan) return;
    if (same != top_.end()) top_.erase(same);
    top_.insert(std::upper_bound(top_.begin(), top_.end(), e.makespan, [](double v, const auto& t) { return v < t.first; }),
                {e.makespan, c});
    if (top_.size() > kPolished) top_.pop_back();
  }

  // ---- phase 2: hill climbing over in-flight limits, memory choices and policy switches ----------
  void climb(ScheduleCandidate current, size_t seed) {
    const CostTable table = table_of(current);
    double value = kInfinity;
    if (const auto schedule = build(current, table)) {
      const SimResult sim = simulate(lower(*schedule), table, {.record_timeline = false, .record_memory = false});
      value = sim.fits ? sim.makespan : kInfinity;
      if (current.policy.inflight.empty()) current.policy.inflight = observed_inflight(*schedule);
    }
    std::mt19937 random(static_cast<uint32_t>(seed * 7919 + 17));
    for (bool improved = true; improved && !out_of_time();) {
      improved = false;
      std::vector<ScheduleCandidate> around = neighbours(current);
      std::shuffle(around.begin(), around.end(), random);
      for (ScheduleCandidate& next : around) {
        next.lower_bound = lower_bound_of(next);
        next.order = current.order;
        const Evaluation e = evaluate(next);
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

  static std::vector<int> observed_inflight(const Schedule& schedule) {
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

  std::vector<ScheduleCandidate> neighbours(const ScheduleCandidate& c) const {
    const Structure& s = structures_[c.structure];
    std::vector<ScheduleCandidate> out;
    for (size_t d = 0; d < c.policy.inflight.size(); ++d)
      for (int delta : {-1, 1}) {
        ScheduleCandidate n = c;
        n.policy.inflight[d] += delta;
        if (n.policy.inflight[d] >= 1) out.push_back(std::move(n));
      }
    for (size_t k = 0; k < c.rows.size() && problem_.memory_choices; ++k)
      for (int r = 0; r < kRows; ++r)
        if (r != c.rows[k] && s.has_row[r]) {
          ScheduleCandidate n = c;
          n.rows[k] = static_cast<uint8_t>(r);
          out.push_back(std::move(n));
        }
    ScheduleCandidate n = c;
    n.policy.backward_first = !n.policy.backward_first;
    out.push_back(n);
    n = c;
    n.policy.split_backward = !n.policy.split_backward;
    out.push_back(n);
    if (c.policy.split_backward) {
      n = c;
      n.policy.weight = n.policy.weight == WeightTiming::FillIdle ? WeightTiming::Late : WeightTiming::FillIdle;
      out.push_back(n);
    }
    if (stages_per_device(s.placement, s.chunks) > 1) {
      n = c;
      n.policy.forward = n.policy.forward == ForwardOrder::Oldest ? ForwardOrder::Shallow : ForwardOrder::Oldest;
      out.push_back(n);
    }
    return out;
  }

  // ---- small instances: branch and bound over every per-device order -------------------------------
  void exact_phase() {
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
      const ExactResult r = exact_schedule(structures_[c.structure].skeleton, table_of(c), c.policy.split_backward, exact);
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

  // ---- phase 3: local search over the best schedule's per-device orders ----------------------------
  // Swaps neighbouring compute actions of one device (not two of the same stage and kind, whose
  // micro-batch order is kept, nor a micro-batch's own F and backward), keeping a swap when the
  // simulated makespan falls and the schedule still fits; passes until none helps. The simulator
  // rejects orders that deadlock.
  // Until `until` seconds into the search (the budget bounds it too).
  void polish(double until) {
    std::vector<std::pair<double, ScheduleCandidate>> starts;
    {
      std::lock_guard lock(mutex_);
      for (const auto& entry : top_) {
        const ScheduleCandidate& c = entry.second;
        const bool done =
            std::any_of(polished_starts_.begin(), polished_starts_.end(), [&](const ScheduleCandidate& d) {
              return d.structure == c.structure && d.rows == c.rows && d.policy == c.policy;
            });
        if (!done) starts.push_back(entry), polished_starts_.push_back(c);
      }
    }
    if (!options_.local_search || starts.empty() || out_of_time()) return;
    phase("order polishing");
    parallel(starts.size(), [&](size_t i) { polish(starts[i].second, until); });
  }

  void polish(const ScheduleCandidate& start, double until) {
    const CostTable table = table_of(start);
    std::optional<Schedule> listed = order_of(start, table);
    if (!listed) return;
    Schedule& order = *listed;
    auto makespan_of = [&](const Schedule& s) {
      const SimOutcome sim = try_simulate(lower(with_memory_actions(s, start)), table,
                                          {.record_timeline = false, .record_memory = false});
      if (!sim.ran()) return kInfinity;  // the swap made the order deadlock
      ++evaluated_;
      return sim.status == SimStatus::Ok ? sim.result.makespan : kInfinity;
    };
    double value = makespan_of(order);
    // Every order better than the best so far becomes the answer at once (anytime).
    auto publish = [&] {
      std::lock_guard lock(mutex_);
      if (value >= best_.makespan) return;
      best_.makespan = value;
      best_.candidate = start;
      best_builtin_ = -1;
      polished_ = order;
      order_origin_ = ", then reordered by local search";
      record_improvement_locked(describe_candidate(start) + order_origin_);
    };
    auto stop = [&] { return out_of_time() || elapsed() >= until; };
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
        improved = advance_fronts(order, start, table, value, stop, publish);
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
  bool advance_fronts(Schedule& order, const ScheduleCandidate& start, const CostTable& table, double& value, Stop stop,
                      Publish publish) {
    const int M = order.num_microbatches, stages = order.num_stages();
    auto slot = [&](ActionKind kind, int stage, int mb) {
      const int k = kind == ActionKind::F ? 0 : kind == ActionKind::W ? 2 : 1;  // I and B: the backward
      return (static_cast<size_t>(k) * stages + stage) * M + mb;
    };
    std::vector<Interval> when(3 * static_cast<size_t>(stages) * M);
    auto measure = [&](const Schedule& s, bool record) -> std::pair<double, double> {
      const Schedule lowered = lower(with_memory_actions(s, start));
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
          const bool compute = x.kind == ActionKind::F || x.kind == ActionKind::I || x.kind == ActionKind::B ||
                               x.kind == ActionKind::W;
          if (record && compute && x.microbatch >= 0) when[slot(x.kind, x.stage, x.microbatch)] = sim.timeline[d][i];
        }
        finishing += last;
      }
      return {sim.makespan, finishing};
    };
    auto transfer = [&](int from, int to) {
      const int a = order.stage_device[from], b = order.stage_device[to];
      return a == b ? 0.0 : table.link_between(a, b).transfer_time(
                                table.stages[order.chunk_of_stage(std::min(from, to))].output_bytes);
    };
    // When the action's inputs are there, in the current order's simulation.
    auto ready = [&](const Action& x) {
      if (x.kind == ActionKind::F)
        return order.is_first_stage(x.stage) ? 0.0 : when[slot(ActionKind::F, x.stage - 1, x.microbatch)].end + transfer(x.stage - 1, x.stage);
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
                  if (a.kind != ActionKind::F && a.kind != ActionKind::I && a.kind != ActionKind::B && a.kind != ActionKind::W) break;
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

  // ---- reporting --------------------------------------------------------------------------------
  std::string describe_candidate(const ScheduleCandidate& c) const {
    const Structure& s = structures_[c.structure];
    std::array<int, kRows> counts{};
    for (uint8_t r : c.rows) ++counts[r];
    std::string memory;
    for (int r = 0; r < kRows; ++r)
      if (counts[r] > 0) memory += fmt::format("{}{} {}", memory.empty() ? "" : ", ", kRowNames[r], counts[r]);
    return fmt::format("{}, {} partition, m={} x {}, stages {}; {}", placement_name(s.placement, s.chunks),
                       s.partition_name, s.batch.microbatches, s.batch.microbatch_size, memory, describe(c.policy));
  }

  ScheduleCandidateReport report(const ScheduleCandidate& c, const std::optional<Schedule>& order = std::nullopt,
                                 bool unlimited = false) const {
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
      r.schedule = *build(c, limits);
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

  void finish() {
    result_.lower_bound = kInfinity;
    for (int i = 0; i < static_cast<int>(structures_.size()); ++i) {
      ScheduleCandidate c{i, std::vector<uint8_t>(structures_[i].rows.size(), kKeep), {}, 0, 0};
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
    result_.seconds = elapsed();
    if (options_.progress) options_.progress(progress());
  }

  // The least memory the space offers: every stage recomputing, one micro-batch in flight per device,
  // on the placement with one stage per device, scheduled as if memory were unlimited.
  ScheduleCandidateReport smallest_footprint() const {
    int structure = 0;
    for (int i = 0; i < static_cast<int>(structures_.size()); ++i)
      if (structures_[i].placement == PlacementKind::Loop && structures_[i].chunks == 1) {
        structure = i;  // the first: the compute-balanced cut
        break;
      }
    const Structure& s = structures_[structure];
    ScheduleCandidate c{structure, std::vector<uint8_t>(s.rows.size(), kRecompute), {}, 0, 0};
    c.policy.inflight.assign(problem_.devices, 1);
    ScheduleCandidateReport r = report(c, std::nullopt, true);
    r.name = "smallest footprint";
    r.costs.memory_capacity = {problem_.memory_limit};
    simulate_report(r);
    return r;
  }

  static double peak(const ScheduleCandidateReport& r) {
    return r.peak_memory.empty() ? kInfinity : *std::max_element(r.peak_memory.begin(), r.peak_memory.end());
  }

  // Nothing fits: say by how much, and what would change that.
  std::string what_would_fit() const {
    double total_static = 0;
    for (const auto& row : structures_.front().rows) total_static += row[kKeep].parameter_bytes + row[kKeep].gradient_bytes + row[kKeep].optimizer_bytes;
    const double limit = problem_.memory_limit;
    const int p = problem_.devices;
    const double smallest = peak(result_.best);
    std::string text = fmt::format(
        "no schedule fits {:.4g} bytes per device: even with every stage recomputing and one micro-batch in flight "
        "per device, the fullest device needs {:.4g} bytes",
        limit, smallest);
    if (total_static / p >= limit) {
      const int needed = static_cast<int>(std::ceil(total_static / limit));
      return text + fmt::format("; parameters, gradients and optimizer state alone take {:.4g} bytes, so at least {} "
                                "devices are needed (have {})",
                                total_static, needed + 1, p);
    }
    double fixed = 0;
    if (!result_.best.costs.stages.empty()) {
      std::vector<double> per_device(p, 0);
      for (size_t k = 0; k < result_.best.costs.stages.size(); ++k) {
        const StageCosts& row = result_.best.costs.stages[k];
        per_device[result_.best.schedule.stage_device[k]] += row.parameter_bytes + row.gradient_bytes + row.optimizer_bytes;
      }
      fixed = *std::max_element(per_device.begin(), per_device.end());
    }
    const double b = result_.best.batch.microbatch_size;
    const double smaller = std::floor(b * (limit - fixed) / std::max(smallest - fixed, 1e-300));
    if (smaller >= 1 && smaller < b)
      text += fmt::format("; activations scale with the micro-batch: try a micro-batch of {} samples (now {})", smaller, b);
    else if (b > 1)
      text += fmt::format("; a smaller micro-batch (now {}) would help", b);
    return text + fmt::format("; or more devices (now {}) to spread parameters and activations", p);
  }

  // ---- threads, time, progress ------------------------------------------------------------------
  // `timed`: stop taking items once the budget is spent (the cheap structures are not: every search
  // needs them, however short its budget).
  template <class Work>
  void parallel(size_t count, Work work, bool timed = true) {
    std::atomic<size_t> next{0};
    std::exception_ptr failure;  // the first error of any thread, rethrown once all have stopped
    std::mutex failure_mutex;
    auto loop = [&] {
      try {
        for (size_t i; (i = next++) < count && !(timed && out_of_time());) {
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

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  // The time a phase may run until: `fraction` of what is left; under a simulation count, where
  // answers must not depend on the machine's speed, the whole budget (the count stops it).
  double share(double fraction) const {
    if (options_.max_evaluations > 0) return options_.time_budget;
    return elapsed() + fraction * (options_.time_budget - elapsed());
  }
  bool out_of_time() const {
    return elapsed() >= options_.time_budget || (options_.max_evaluations > 0 && evaluated_ >= options_.max_evaluations);
  }
  double best_makespan() const {
    std::lock_guard lock(mutex_);
    return best_.makespan;
  }

  SearchProgress progress() const {
    SearchProgress p;
    p.seconds = elapsed();
    p.evaluated = evaluated_ + static_cast<int64_t>(result_.builtins.size());
    p.pruned = pruned_;
    p.best_makespan = best_.makespan;
    p.best = best_family_;
    p.phase = phase_;
    return p;
  }

  void phase(const std::string& name) {
    std::lock_guard lock(mutex_);
    phase_ = name;
  }

  void record_improvement(const std::string& family) {
    std::lock_guard lock(mutex_);
    record_improvement_locked(family);
  }
  void record_improvement_locked(const std::string& family) {
    best_family_ = family;
    result_.history.push_back({elapsed(), best_.makespan});
    if (options_.progress) {
      options_.progress(progress());
      last_report_ = elapsed();
    }
  }
  void maybe_report() {
    if (!options_.progress || elapsed() - last_report_ < 0.5) return;
    std::lock_guard lock(mutex_);
    if (elapsed() - last_report_ < 0.5) return;
    last_report_ = elapsed();
    options_.progress(progress());
  }

  const SearchProblem& problem_;
  const SearchOptions& options_;
  const Clock::time_point start_;
  double seq_len_ = 1;
  int threads_ = 1;
  std::vector<Structure> structures_;
  mutable std::map<std::string, Partition> balanced_;
  mutable std::mutex mutex_;
  struct Best {
    double makespan = kInfinity;
    bool fits_any = false;
    std::optional<ScheduleCandidate> candidate;
  } best_;
  int best_builtin_ = -1;
  double builtin_bound_ = kInfinity;  // the least structural bound of the built-ins' placements
  std::optional<Schedule> polished_;  // the best candidate's order after polishing or branch and bound
  mutable std::mutex bounds_mutex_;
  mutable std::map<std::tuple<int, std::vector<uint8_t>, bool>, double> bounds_;  // tight_bound_of's memo
  std::string order_origin_;
  static constexpr size_t kPolished = 3;
  std::vector<std::pair<double, ScheduleCandidate>> top_;  // the best of different structures, fastest first
  std::vector<ScheduleCandidate> polished_starts_;
  std::string best_family_, phase_;
  std::atomic<int64_t> evaluated_{0}, pruned_{0}, stalled_{0};
  std::atomic<double> last_report_{0};
  int64_t next_order_ = 0;
  SearchResult result_;
};

}  // namespace

SearchResult search_schedules(const SearchProblem& problem, const SearchOptions& options) {
  return AnytimeSearch(problem, options).run();
}

}  // namespace flexpipe
