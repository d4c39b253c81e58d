// The anytime search's shared private declarations: its search space's types (structures,
// placement kinds, memory rows), its candidates, and the AnytimeSearch class whose members the
// files of src/search/ define one concept each (docs/search.md, "Code").
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "flexpipe/partition/partitioner.h"
#include "flexpipe/search/search.h"

namespace flexpipe::search {

using Clock = std::chrono::steady_clock;

// What a stage does with the tensors its forward saves: one cost-table row per choice.
enum Row : uint8_t { kKeep = 0, kRecompute = 1, kOffload = 2, kPlan = 3, kRows = 4 };
inline constexpr const char* kRowNames[kRows] = {"keep", "recompute", "offload", "plan"};

// The partition name of a cost table's structures: its entries are the stages.
inline constexpr const char* kTablePartition = "cost table";

// How a structure lays its stages on the devices; with a loop's chunk count it makes the placement.
enum class PlacementKind : uint8_t { Loop, V, Bidirectional };

// Model chunks (stages of one pipeline) of a placement on p devices; stages each device holds.
inline int chunk_count(PlacementKind placement, int chunks, int p) {
  return placement == PlacementKind::V ? 2 * p : placement == PlacementKind::Bidirectional ? p : chunks * p;
}
inline int stages_per_device(PlacementKind placement, int chunks) {
  return placement == PlacementKind::Loop ? chunks : 2;
}

// A placement, a partition and a batch split: everything but the memory choices and the order.
struct Structure {
  BatchSplit batch;
  PlacementKind placement = PlacementKind::Loop;
  int chunks = 1;
  std::string partition_name;  // "balanced", "dawn", "dawn (greedy)" or a given plan's name
  Schedule skeleton;           // placement and micro-batches, no actions
  Partition partition;
  CostTable base;                                   // links and capacity; stages filled from `rows` per candidate
  std::vector<std::array<StageCosts, kRows>> rows;  // per stage
  std::array<bool, kRows> has_row{};
  std::array<std::vector<MemoryDecision>, kRows> decisions;   // per graph node, per row kind
  std::vector<std::array<char, kRows>> recomputes, offloads;  // per stage: whether that row does
  // Per stage: whether the plan row offloads the recompute checkpoints (RELOAD right before R).
  std::vector<char> plan_offloads_checkpoints;
};

// What one simulation evaluates: a structure, its memory rows and what orders its actions, the list
// scheduler under a policy or one of Zero Bubble's heuristic's variants (reported as a
// ScheduleCandidateReport).
struct ScheduleCandidate {
  int structure = 0;
  std::vector<uint8_t> rows;  // per stage
  ListPolicy policy;          // with zero_bubble: split_backward only (the heuristic splits)
  int8_t zero_bubble = -1;    // index into zero_bubble_variants(); -1: the list scheduler orders
  double lower_bound = 0;
};

// A total order of candidates apart from their makespan (structure, rows, then the policy's fields):
// equal makespans are settled by it, the same way whatever order the workers find them in.
inline auto candidate_key(const ScheduleCandidate& c) {
  return std::tie(c.structure, c.rows, c.policy.split_backward, c.policy.backward_first, c.policy.weight,
                  c.policy.forward, c.policy.inflight, c.zero_bubble);
}

// Where an answer comes from. Equal makespans go to the earlier source here, then to the lower
// candidate key: a built-in over a generated list, a generated list over a reordering of one.
enum class Source : uint8_t { Builtin, Candidate, Polished, Exact };

// Most promising first: the order candidates are tried in.
inline bool lower_bound_first(const ScheduleCandidate& a, const ScheduleCandidate& b) {
  return a.lower_bound < b.lower_bound;
}

struct Evaluation {
  bool fits = false;
  double makespan = kInfinity;
};

struct MemoryPlan;  // search_space.cpp: a partitioner's decisions per operator and checkpoint offloads

// The search over structures and list policies (exact_schedule.cpp's BranchAndBound settles the orders
// of the small ones), improving its answer until the budget runs out.
class AnytimeSearch {
 public:
  AnytimeSearch(const SearchProblem& problem, const SearchOptions& options);
  SearchResult run();

 private:
  // search.cpp: the phases in order.
  void run_seeds(size_t first, std::vector<ScheduleCandidate>& seeds, std::vector<std::pair<double, int>>& finished);

  // search_space.cpp: structures (placements x partitions x batch splits, with their cost rows) and
  // what is enumerated on each.
  void prepare_structures(bool dawn, MemorySolver solver = MemorySolver::Auto);
  AggregationOptions aggregation(const BatchSplit& batch) const;
  std::optional<Structure> make_structure(const BatchSplit& batch, PlacementKind placement, int chunks, bool dawn,
                                          const GivenPartition* given, MemorySolver solver) const;
  Partition balanced_partition(int stages, const BatchSplit& batch, const Shape& shape, double host_bandwidth) const;
  PartitionResult dawn_partition(const BatchSplit& batch, PlacementKind placement, int chunks, double host_bandwidth,
                                 MemorySolver solver) const;
  void add_cost_rows(Structure& s, const MemoryPlan& plan, double host_bandwidth) const;
  std::vector<std::vector<int>> inflight_profiles(const Structure& s) const;
  std::vector<ListPolicy> policies(const Structure& s, bool split) const;
  std::vector<std::vector<uint8_t>> row_patterns(const Structure& s) const;
  std::vector<ScheduleCandidate> seed_candidates(size_t first) const;
  bool zero_bubble_applies(const Structure& s) const;
  // The families searched (SearchProblem's placement switches).
  bool placement_searched(PlacementKind placement, int chunks) const;
  bool builtin_placement_searched(const Schedule& builtin) const;
  Schedule skeleton_of(const BatchSplit& batch, PlacementKind placement, int stages) const;

  // cost_table_space.cpp: the structures of a per-stage cost table (SearchProblem::stage_costs).
  void prepare_table_structures();
  Structure table_structure(const BatchSplit& batch, PlacementKind placement, int chunks) const;
  CostTable table_costs() const;

  // candidates.cpp: a candidate's costs, bounds, schedule and evaluation, and its neighbours.
  CostTable table_of(const ScheduleCandidate& c) const;
  enum class Flag { Recompute, Offload, ReloadBeforeRecompute };
  std::vector<char> flags(const ScheduleCandidate& c, Flag which) const;
  double lower_bound_of(const ScheduleCandidate& c) const;
  double tight_bound_of(const ScheduleCandidate& c) const;
  std::optional<Schedule> order_of(const ScheduleCandidate& c, const CostTable& table) const;
  Schedule with_memory_actions(const Schedule& order, const ScheduleCandidate& c) const;
  std::optional<Schedule> build(const ScheduleCandidate& c, const CostTable& table) const;
  Evaluation evaluate(const ScheduleCandidate& c, double prune_at);
  void offer(const ScheduleCandidate& c, const Evaluation& e);
  bool improves_locked(double makespan, Source source, const ScheduleCandidate& c) const;
  void set_best_locked(double makespan, Source source, const ScheduleCandidate& c);
  std::vector<ScheduleCandidate> neighbours(const ScheduleCandidate& c) const;
  // Whether memory row r of stage k does something other than keep (a table may not let every stage
  // recompute; a row that would not is never chosen).
  static bool row_acts(const Structure& s, size_t k, int r);

  // hill_climbing.cpp: phase 2.
  void climb_from(const std::vector<ScheduleCandidate>& seeds, const std::vector<std::pair<double, int>>& finished,
                  size_t first);
  void climb(ScheduleCandidate current, size_t seed, double prune_at);
  static std::vector<int> observed_inflight(const Schedule& schedule);

  // exact_phase.cpp: branch and bound on the small instances.
  void exact_phase();

  // order_polishing.cpp: phase 3.
  void polish(int64_t work);
  void polish(const ScheduleCandidate& start, int64_t work);
  template <class Stop, class Publish>
  bool advance_fronts(Schedule& order, const ScheduleCandidate& start, const CostTable& table, double& value,
                      int64_t& done, Stop stop, Publish publish);

  // reporting.cpp: the built-ins' reports, the answer's, and what would fit when nothing does.
  void report_builtins();
  void simulate_report(ScheduleCandidateReport& r) const;
  std::string describe_candidate(const ScheduleCandidate& c) const;
  ScheduleCandidateReport report(const ScheduleCandidate& c, const std::optional<Schedule>& order = std::nullopt,
                                 bool unlimited = false) const;
  void finish();
  ScheduleCandidateReport smallest_footprint() const;
  std::string smallest_footprint_actions() const;
  static double peak(const ScheduleCandidateReport& r);
  std::string what_would_fit() const;

  // worker_pool.cpp: threads, time, progress.
  void parallel(size_t count, const std::function<void(size_t)>& work, size_t untimed = 0);
  Clock::time_point now() const;  // options_.clock, or steady_clock
  double elapsed() const;
  bool out_of_time() const;
  double best_makespan() const;
  SearchProgress progress() const;
  void phase(const std::string& name);
  void close_phase_locked();
  void record_improvement(const std::string& family);
  void record_improvement_locked(const std::string& family);
  void maybe_report() const;
  // The partitioner's should_stop: out of time; meanwhile a progress line every half second, since one
  // partitioner run can take seconds on a large graph.
  bool partitioner_should_stop() const;

  const SearchProblem& problem_;
  const SearchOptions& options_;
  const Clock::time_point start_;
  double seq_len_ = 1;
  int threads_ = 1;
  std::vector<Structure> structures_;
  mutable std::map<std::string, Partition> balanced_;
  // The greedy memory solver's plans per (micro-batches, micro-batch size, placement, chunks).
  mutable std::mutex greedy_plans_mutex_;
  mutable std::map<std::tuple<int, double, int, int>, PartitionResult> greedy_plans_;
  mutable std::mutex mutex_;
  struct Best {
    double makespan = kInfinity;
    bool fits_any = false;
    Source source = Source::Candidate;
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
  size_t phase_open_ = 0;  // result_.phases' size when its last stretch was closed
  std::atomic<int64_t> evaluated_{0}, pruned_{0}, stalled_{0};
  mutable std::atomic<double> last_report_{0};
  SearchResult result_;
};

}  // namespace flexpipe::search
