// The automated scheduler: given a model's cost graph, devices, a memory limit and a batch, find the
// fastest schedule that fits, across placements (loop with 1-4 chunks per device, V-shape,
// bidirectional), stage partitions (compute-balanced, DawnPiper's), whole or split
// backward, per-device in-flight limits, where W runs, per-stage recompute / offload and, when the
// global batch allows, the micro-batch count. Every candidate is simulated with the model's costs;
// candidates whose lower bound cannot beat the best so far are skipped. Anytime and multithreaded.
// Method and measurements: docs/search.md.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/search/bound.h"
#include "flexpipe/search/list_scheduler.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/quantity.h"

namespace flexpipe {

// One way to cut the global batch: m micro-batches of `microbatch_size` samples.
struct BatchSplit {
  int microbatches = 0;
  double microbatch_size = 1;
  friend bool operator==(const BatchSplit&, const BatchSplit&) = default;
};

// A partition to search with, e.g. a plan from `flexpipe partition` (partition_plan.h): its operator
// ranges and per-operator decisions, used on every placement with its stage count at its micro-batch
// size.
struct GivenPartition {
  std::string name;  // for reports: "plan.json"
  Partition partition;
  std::vector<MemoryDecision> decisions;  // per graph node; empty: keep everything
  std::vector<char> offload_checkpoints;  // per stage; empty: none (PlannedStage::offload_checkpoints)
  double microbatch_size = 1;
};

// A per-stage cost table to search from instead of a model's graph: the profile Zero Bubble and
// Megatron users have (docs/search.md, "From a cost table"). Its entries are the model chunks, so it
// allows the placements with that many stages: p entries the loop with one stage per device and the
// bidirectional pair, 2p the V and the loop with two stages per device (interleaved), v p the loop
// with v.
struct StageCostProblem {
  std::string name;             // for reports: the file's name
  CostTable costs;              // one entry per model chunk, its links, host link and memory capacity
  std::vector<char> recompute;  // per chunk: R's cost is given, so the stage may recompute
  bool offload = false;         // the host link is given, so stages may offload
};

struct SearchProblem {
  // Set: the search takes its stages from this table, and `graph`, `batches`' micro-batch sizes,
  // `seq_len`, `aggregation` and `partitions` are not read.
  std::optional<StageCostProblem> stage_costs;
  CostGraph graph;
  int devices = 0;
  std::vector<BatchSplit> batches;  // at least one; more when the global batch allows several
  double seq_len = 0;               // 0: the graph's reference
  double memory_limit = kInfinity;  // bytes per device; with stage_costs, when finite, instead of its capacity
  ByteUnits byte_units = ByteUnits::Decimal;  // how messages print a graph's bytes: the units the limit was given in
  // Byte sizes and links; its shape, decisions and capacity are set per candidate.
  AggregationOptions aggregation;
  // The placements searched (the families of `flexpipe search --families`); a built-in may be the
  // answer only when its placement is among them. With stage_costs, the loop with the table's S / p
  // stages per device is searched whenever max_chunks >= 2.
  bool single_stage_loop = true;  // the loop with one stage per device (1F1B's, ZB-H1's)
  int max_chunks = 4;             // loop placements with 2..max_chunks stages per device (interleaved)
  bool v_shape = true;            // the V-shaped placement (2 stages per device)
  bool bidirectional = true;      // DualPipe's pair of pipelines in opposite directions
  bool memory_choices = true;     // per-stage recompute / offload (else everything is kept)
  bool recompute = true;          // with memory_choices: recompute (`--no-recompute` clears it)
  bool offload = true;            // with memory_choices: offload (`--no-offload` clears it)
  std::vector<GivenPartition> partitions;
};

struct SearchProgress {
  double seconds = 0;
  int64_t evaluated = 0;
  int64_t pruned = 0;
  double best_makespan = kInfinity;
  std::string best;  // the best candidate's description
  std::string phase;
};

// A search that ends before its budget (SearchResult::exhausted) gives the same answer whatever
// `threads` and `time_budget`: ties go by a fixed order, pruning reads the best at fixed points, and
// no phase stops on a share of the time (docs/search.md, "Pruning" and after the method).
struct SearchOptions {
  double time_budget = 10;  // seconds of wall time, preparation included, counted from `start`
  // When the budget's clock started: a caller that reads and prepares the model before it calls
  // search_schedules passes the time it began, so that the budget holds for the whole command (the
  // CLI: before it reads the model). Unset: when search_schedules is called.
  std::optional<std::chrono::steady_clock::time_point> start;
  // Where the budget and the reported times read the time (called from every worker thread). Unset:
  // steady_clock. A test gives its own, so that what it asserts of times is not the machine's speed.
  std::function<std::chrono::steady_clock::time_point()> clock;
  int threads = 1;
  // Called (serialized) on every improvement and about every 0.5 s.
  std::function<void(const SearchProgress&)> progress;
  bool local_search = true;        // phase 2: hill climbing from the best candidates of phase 1
  bool partitioner = true;         // DawnPiper's plans as partitions (needs the memory limit to matter)
  bool builtin_candidates = true;  // a built-in may be the answer (else they are only reported)
  // Small instances (p <= 4, m <= 8, at most 8 stages, 16 when m <= p): branch and bound
  // (exact_schedule.h) over every per-device order of each placement with everything kept, below the
  // answer so far, up to a fixed number of nodes per placement.
  bool exact = true;
  // Stop after this many simulations as well (0: no cap). With one thread and a cap reached before
  // the budget, every run gives the same answer too (train --schedule auto needs that: each rank
  // searches for itself).
  int64_t max_evaluations = 0;
};

// A simulated candidate: a built-in or one the search generated.
struct ScheduleCandidateReport {
  std::string name;     // built-in name, or "search"
  std::string family;   // how it was made: placement, partition, memory decisions, policy
  std::string skipped;  // a built-in that does not run at these parameters: why; "" otherwise
  Schedule schedule;    // compute-only, with R / OFFLOAD / RELOAD where the stages recompute or offload
  CostTable costs;
  Partition partition;
  std::vector<MemoryDecision> decisions;  // per graph node
  BatchSplit batch;
  double makespan = kInfinity;
  double bubble_ratio = 0;
  double lower_bound = 0;           // the simulator's, for this schedule and costs
  std::vector<double> peak_memory;  // per device
  bool fits = false;
  // A built-in whose placement is among the problem's searched families: only such a one may be the
  // answer, or the built-in the answer is compared with.
  bool placement_searched = true;
};

// One stretch of the search under one phase name, in the order they ran (a name may come back: the
// early, capped polishings and the last one are three stretches of "order polishing").
struct SearchPhase {
  std::string name;
  double seconds = 0;     // wall time of the stretch
  int64_t evaluated = 0;  // candidates simulated in it (branch and bound: one per structure searched)
  int64_t pruned = 0;     // skipped by the lower bound in it
};

struct SearchResult {
  bool found = false;                             // some candidate fits the memory limit
  ScheduleCandidateReport best;                   // the fastest that fits (else the smallest footprint)
  std::vector<ScheduleCandidateReport> builtins;  // one per built-in, at the first batch split
  std::string infeasible;                         // when nothing fits: what would be needed
  // No schedule in the space is faster: the least, over the placements and partitions searched (and
  // the built-ins'), of the largest of each device's work plus the time its first input needs to
  // arrive, and one micro-batch's path, with everything kept.
  double lower_bound = 0;
  int64_t evaluated = 0;  // candidates simulated
  int64_t pruned = 0;     // skipped by the lower bound
  int64_t stalled = 0;    // policies that could not place every action
  double seconds = 0;
  bool exhausted = false;  // the search ended before its budget: its answer does not depend on it or the threads
  // The exact phase proved that no per-device order (micro-batches in order within a stage) of any
  // placement and partition searched, with everything kept, beats the answer: branch and bound on
  // the small ones, the lower bound on the others.
  bool proven_optimal = false;
  std::vector<std::pair<double, double>> history;  // (seconds, best makespan) at each improvement
  std::vector<SearchPhase> phases;                 // where the time went (docs/performance.md)
};

SearchResult search_schedules(const SearchProblem& problem, const SearchOptions& options = {});

// The fastest built-in that runs at the search's parameters, fits and has a placement the problem
// searches, or null when none does.
const ScheduleCandidateReport* fastest_builtin(const SearchResult& result);
// The answer to train: the search's own schedule only when it is predicted at least `margin` (a
// fraction of the built-in's makespan) faster than the fastest built-in, which is trained otherwise.
// A smaller predicted gain is within what the simulator misses on a real run (docs/fidelity.md).
const ScheduleCandidateReport& answer_to_train(const SearchResult& result, double margin);
// The margin `train --schedule auto` uses: the one given; without one, when the ranks it starts on this
// machine outnumber its cores, 1 (the fastest built-in: ranks then wait for a core, which the simulator
// does not model, and its error differs by schedule more than the search's edge, docs/performance.md
// "Fidelity"); otherwise the default. cores: 0 when unknown.
double training_margin(double margin, bool margin_given, int ranks_on_machine, unsigned cores);

}  // namespace flexpipe
