// Exact scheduling by depth-first branch and bound (include/flexpipe/search/exact_schedule.h).
//
// A node is a prefix of a canonical placement sequence: every device's list is built at once, each
// placed action starting at max(its device's free time, its inputs' arrival), in nondecreasing
// (start, device) order. A semi-active schedule has exactly one such sequence when every duration is
// positive (an action enabled by a placement starts after that placement's end, so the sequence is
// monotone), so the search visits each one once. With zero durations the tie rule could skip
// schedules, so it is dropped and duplicates are accepted instead.
//
// Memory is checked where it can peak, at F starts. On a device that runs one action at a time every
// earlier action has ended by then, so with a positive F duration the level at an F's start is the
// device's net allocation so far, independent of timing, and is checked on placement. A zero-length
// F could be followed at the same instant by a zero-length backward whose release counts at that
// instant too, so then levels are checked when the search moves past an instant instead.
//
// Pruning: a lower bound (per device, its earliest possible next start plus its remaining work,
// plus the backward chain its last B must feed; per (stage, kind), the next micro-batch's earliest
// start plus the later micro-batches and the longest chain after the last one; an F that does not
// fit waits for a release), and a dominance memo of searched nodes (see remember()), which is what
// makes memory-bound instances tractable. Branches are tried earliest start first, so the first
// dive is a list schedule and usually a good incumbent.
#include "flexpipe/search/exact_schedule.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/ir/lowering.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

// Per-stage kind slots. kBackward is B, or I when the backward is split.
constexpr int kForward = 0;
constexpr int kBackward = 1;
constexpr int kWeight = 2;

// An action the node at some depth may place next, at its earliest start: one branch of that node.
struct Branch {
  double start;
  int32_t stage;
  int32_t kind;
  int32_t microbatch;
  int32_t rank;  // branch order on one device at one start: backward, forward, weight
};

// An action on the current path (or the best path found): what was placed at that depth.
struct PlacedAction {
  int32_t stage;
  int32_t kind;
  int32_t microbatch;
};

// The dominance memo: one bucket per placed set, holding a list of searched nodes' frontiers.
struct Bucket {
  uint64_t hash = 0;
  int64_t counts = -1;  // offset of the placed counts in memo_counts_; -1: empty
  int32_t head = -1;    // newest entry
  int32_t spare = -1;   // entries dropped from the list, their frontiers' room free for reuse
};
struct Entry {
  int64_t frontier;  // offset in frontiers_
  int32_t next;
  int32_t last_device;
};

using Clock = std::chrono::steady_clock;

// The most searched nodes the dominance memo keeps per placed set.
constexpr int kEntriesPerBucket = 32;

void check_input(const Schedule& skeleton, const CostTable& costs, bool split) {
  if (skeleton.num_pipelines != 1)
    throw Error(fmt::format("exact schedule: needs a single pipeline, the skeleton has {}", skeleton.num_pipelines));
  if (skeleton.num_devices <= 0 || skeleton.num_microbatches <= 0 || skeleton.stages_per_pipeline <= 0)
    throw Error(fmt::format("exact schedule: needs devices, micro-batches and stages (got {}, {} and {})",
                            skeleton.num_devices, skeleton.num_microbatches, skeleton.stages_per_pipeline));
  if (skeleton.stage_device.size() != static_cast<size_t>(skeleton.num_stages()))
    throw Error(fmt::format("exact schedule: the placement names {} stages, the skeleton has {}",
                            skeleton.stage_device.size(), skeleton.num_stages()));
  for (size_t s = 0; s < skeleton.stage_device.size(); ++s)
    if (skeleton.stage_device[s] < 0 || skeleton.stage_device[s] >= skeleton.num_devices)
      throw Error(fmt::format("exact schedule: stage {} is placed on device {}, which does not exist", s,
                              skeleton.stage_device[s]));
  if (skeleton.device_actions.size() != static_cast<size_t>(skeleton.num_devices))
    throw Error(fmt::format("exact schedule: the skeleton has {} action lists for {} devices",
                            skeleton.device_actions.size(), skeleton.num_devices));
  for (int d = 0; d < skeleton.num_devices; ++d)
    if (!skeleton.device_actions[d].empty())
      throw Error(fmt::format("exact schedule: the skeleton must have no actions, device {} has {}", d,
                              skeleton.device_actions[d].size()));
  if (!skeleton.custom_ops.empty()) throw Error("exact schedule: custom operations are not supported");
  for (int32_t pipeline : skeleton.microbatch_pipeline)
    if (pipeline != 0) throw Error("exact schedule: every micro-batch must belong to pipeline 0");
  check_cost_table(costs, skeleton.stages_per_pipeline, skeleton.num_devices, "cost table");
  auto usable = [](double value) { return std::isfinite(value) && value >= 0; };
  for (size_t c = 0; c < costs.stages.size(); ++c) {
    const StageCosts& stage = costs.stages[c];
    for (double value :
         {stage.forward, stage.backward, stage.backward_input, stage.backward_weight, stage.activation_bytes,
          stage.parameter_bytes, stage.gradient_bytes, stage.optimizer_bytes, stage.output_bytes})
      if (!usable(value))
        throw Error(fmt::format("exact schedule: stage {}'s costs must be finite and not negative", c));
    // Outside [0, activation_bytes] an I or W end would allocate, and memory could peak there.
    if (split && !(stage.freed_by_input >= 0 && stage.freed_by_input <= stage.activation_bytes))
      throw Error(
          fmt::format("exact schedule: stage {}'s freed_by_input ({}) must lie between 0 and its "
                      "activation_bytes ({})",
                      c, stage.freed_by_input, stage.activation_bytes));
  }
}

class BranchAndBound {
 public:
  BranchAndBound(const Schedule& skeleton, const CostTable& costs, bool split, const ExactOptions& options)
      : skeleton_(skeleton),
        stages_(skeleton.num_stages()),
        microbatches_(skeleton.num_microbatches),
        devices_(skeleton.num_devices),
        kinds_(split ? 3 : 2),
        split_(split),
        best_(options.upper_bound),
        time_limit_(options.time_limit_seconds),
        max_nodes_(options.max_nodes),
        memo_budget_(options.memo_megabytes > 0 ? static_cast<size_t>(std::min(options.memo_megabytes, 1e9) * (1 << 20))
                                                : 0) {
    prepare(costs);
  }

  ExactResult run(const CostTable& costs) {
    started_ = Clock::now();
    dfs(0);
    ExactResult result;
    result.nodes = nodes_;
    result.proven_optimal = !stopped_;
    result.schedule = skeleton_;
    if (!best_path_.empty()) {
      static constexpr ActionKind kSplitKinds[] = {ActionKind::F, ActionKind::I, ActionKind::W};
      static constexpr ActionKind kWholeKinds[] = {ActionKind::F, ActionKind::B};
      for (const PlacedAction& p : best_path_)
        result.schedule.device_actions[device_of_[p.stage]].push_back(
            Action::make(split_ ? kSplitKinds[p.kind] : kWholeKinds[p.kind], p.stage, p.microbatch));
      // The search's arithmetic mirrors the simulator's, but the simulator is the reference.
      result.makespan = simulate(lower(result.schedule), costs, SimOptions{false, false}).makespan;
      result.found = true;
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    return result;
  }

 private:
  int slot(int stage, int kind) const { return stage * kinds_ + kind; }
  int cell(int stage, int microbatch) const { return stage * microbatches_ + microbatch; }

  void prepare(const CostTable& costs) {
    prepare_stages(costs);
    prepare_tails();
    prepare_devices(costs);
    prepare_search();
  }

  // Each stage's durations, releases, links and transfer times.
  void prepare_stages(const CostTable& costs) {
    const int slots = stages_ * kinds_;
    device_of_.assign(skeleton_.stage_device.begin(), skeleton_.stage_device.end());
    duration_.assign(slots, 0);
    release_.assign(slots, 0);
    allocation_.assign(stages_, 0);
    forward_link_.assign(stages_, -1);
    backward_link_.assign(stages_, -1);
    forward_transfer_.assign(stages_, 0);
    backward_transfer_.assign(stages_, 0);
    all_positive_ = true;

    std::vector<int64_t> pairs;  // src * devices + dst of each link used, its index the link's id
    auto link_id = [&](int src, int dst) {
      const int64_t pair = static_cast<int64_t>(src) * devices_ + dst;
      auto it = std::find(pairs.begin(), pairs.end(), pair);
      if (it != pairs.end()) return static_cast<int>(it - pairs.begin());
      pairs.push_back(pair);
      return static_cast<int>(pairs.size()) - 1;
    };
    for (int s = 0; s < stages_; ++s) {
      const StageCosts& cost = costs.stages[s];
      duration_[slot(s, kForward)] = cost.forward;
      allocation_[s] = cost.activation_bytes;
      if (split_) {
        duration_[slot(s, kBackward)] = cost.backward_input;
        duration_[slot(s, kWeight)] = cost.backward_weight;
        release_[slot(s, kBackward)] = cost.freed_by_input;
        release_[slot(s, kWeight)] = cost.activation_bytes - cost.freed_by_input;
      } else {
        duration_[slot(s, kBackward)] = cost.backward;
        release_[slot(s, kBackward)] = cost.activation_bytes;
      }
      for (int k = 0; k < kinds_; ++k) all_positive_ = all_positive_ && duration_[slot(s, k)] > 0;
      if (s + 1 < stages_ && device_of_[s + 1] != device_of_[s]) {
        const Link& link = costs.link_between(device_of_[s], device_of_[s + 1]);
        forward_link_[s] = link_id(device_of_[s], device_of_[s + 1]);
        forward_transfer_[s] = link.transfer_time(cost.output_bytes);
      }
      if (s > 0 && device_of_[s - 1] != device_of_[s]) {
        const Link& link = costs.link_between(device_of_[s], device_of_[s - 1]);
        backward_link_[s] = link_id(device_of_[s], device_of_[s - 1]);
        backward_transfer_[s] = link.transfer_time(costs.stages[s - 1].output_bytes);
      }
      if (!std::isfinite(forward_transfer_[s]) || !std::isfinite(backward_transfer_[s]) || forward_transfer_[s] < 0 ||
          backward_transfer_[s] < 0)
        throw Error(fmt::format("exact schedule: a transfer at stage {} takes no finite time", s));
    }
    link_free_.assign(pairs.size(), 0);
  }

  void prepare_tails() {
    const int slots = stages_ * kinds_;
    // Time from the start of one micro-batch's action to the end of that micro-batch's chain.
    tail_.assign(slots, 0);
    for (int s = 0; s < stages_; ++s) {
      const double weight = split_ ? duration_[slot(s, kWeight)] : 0.0;
      const double below = s > 0 ? backward_transfer_[s] + tail_[slot(s - 1, kBackward)] : 0.0;
      tail_[slot(s, kBackward)] = duration_[slot(s, kBackward)] + std::max(weight, below);
      if (split_) tail_[slot(s, kWeight)] = weight;
    }
    for (int s = stages_ - 1; s >= 0; --s) {
      const double after =
          s + 1 < stages_ ? forward_transfer_[s] + tail_[slot(s + 1, kForward)] : tail_[slot(s, kBackward)];
      tail_[slot(s, kForward)] = duration_[slot(s, kForward)] + after;
    }
    // Without split, a device's last action is a B with no successor on the device: stage 0, or a
    // stage whose previous one is elsewhere, and what follows it is the rest of its backward chain.
    end_tail_.assign(stages_, -1);
    if (!split_)
      for (int s = 0; s < stages_; ++s)
        if (s == 0 || device_of_[s - 1] != device_of_[s])
          end_tail_[s] = s == 0 ? 0.0 : backward_transfer_[s] + tail_[slot(s - 1, kBackward)];
  }

  // Each device's stages, its static memory and capacity, and the work it has left.
  void prepare_devices(const CostTable& costs) {
    device_stage_begin_.assign(devices_ + 1, 0);
    for (int s = 0; s < stages_; ++s) ++device_stage_begin_[device_of_[s] + 1];
    for (int d = 0; d < devices_; ++d) device_stage_begin_[d + 1] += device_stage_begin_[d];
    device_stages_.assign(stages_, 0);
    {
      std::vector<int> fill(device_stage_begin_.begin(), device_stage_begin_.end() - 1);
      for (int s = 0; s < stages_; ++s) device_stages_[fill[device_of_[s]]++] = s;
    }

    static_memory_.assign(devices_, 0);
    capacity_.assign(devices_, kInfinity);
    remaining_.assign(devices_, 0);
    remaining_actions_.assign(devices_, 0);
    for (int d = 0; d < devices_; ++d) capacity_[d] = costs.capacity(d);
    // A computation's workspace is counted as always held (its largest on the device): conservative
    // against the simulator, which holds it only while the computation runs.
    std::vector<double> workspace(devices_, 0);
    for (int s = 0; s < stages_; ++s) {
      const StageCosts& cost = costs.stages[s];
      const int d = device_of_[s];
      static_memory_[d] += cost.parameter_bytes + cost.gradient_bytes + cost.optimizer_bytes;
      workspace[d] = std::max(workspace[d], cost.workspace_bytes);
      for (int k = 0; k < kinds_; ++k) remaining_[d] += microbatches_ * duration_[slot(s, k)];
      remaining_actions_[d] += microbatches_ * kinds_;
    }
    for (int d = 0; d < devices_; ++d) static_memory_[d] += workspace[d];
  }

  // The search's state: counts, ready times, the path, the branches and the memo's hashing.
  void prepare_search() {
    const int slots = stages_ * kinds_;
    total_actions_ = stages_ * microbatches_ * kinds_;
    count_.assign(slots, 0);
    const size_t cells = static_cast<size_t>(stages_) * microbatches_;
    forward_ready_.assign(cells, 0);
    gradient_ready_.assign(cells, 0);
    forward_end_.assign(cells, 0);
    backward_end_.assign(cells, 0);
    free_.assign(devices_, 0);
    net_.assign(devices_, 0);
    pending_release_.assign(devices_, 0);
    estimate_.assign(slots, 0);
    path_.assign(total_actions_, PlacedAction{});
    branches_.assign(static_cast<size_t>(total_actions_ + 1) * slots, Branch{});

    memo_enabled_ = all_positive_;
    uint64_t state = 0x9e3779b97f4a7c15ULL;  // splitmix64: fixed, so runs are reproducible
    zobrist_.resize(static_cast<size_t>(slots) * (microbatches_ + 1));
    for (uint64_t& z : zobrist_) {
      uint64_t x = (state += 0x9e3779b97f4a7c15ULL);
      x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
      x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
      z = x ^ (x >> 31);
    }
    hash_ = 0;
    for (int i = 0; i < slots; ++i) hash_ ^= zobrist_[static_cast<size_t>(i) * (microbatches_ + 1)];
    table_.assign(1024, Bucket{});
    frontier_.reserve(2 + devices_ + link_free_.size() + 4 * cells);
  }

  // Whether every device fits at instant `time`, counting each event at it: all actions that start
  // by `time` are placed, and on each device only the last one can still be running.
  bool levels_fit_at(double time) const {
    for (int d = 0; d < devices_; ++d) {
      const double pending = free_[d] > time ? pending_release_[d] : 0.0;
      if (static_memory_[d] + net_[d] + pending > capacity_[d]) return false;
    }
    return true;
  }

  bool out_of_time() {
    if ((nodes_ & 4095) != 0) return false;
    if (max_nodes_ > 0 && nodes_ >= max_nodes_) stopped_ = true;
    if (std::chrono::duration<double>(Clock::now() - started_).count() > time_limit_) stopped_ = true;
    return stopped_;
  }

  // ---- dominance -------------------------------------------------------------------------------
  //
  // Node A dominates node B when both placed the same actions and A is no later in everything a
  // completion reads: device free times, link queues, the arrivals and ends unplaced actions wait
  // for; and A's (last start, last device) is no later and its placed start times sum to no more.
  // Then any completion of B, run from A, starts every action no later and fits the same memory (a
  // device's level at an F's start depends only on its order), so it ends no later. From A it lies
  // in A's subtree unless one of its actions now starts before A's last placement, and then the
  // schedule's start-time sum strictly drops. So a better schedule missed because of a dominance
  // prune would have one no worse, missed with a smaller sum, or with an equal sum by a prune made
  // earlier (inside A's subtree, searched before B): taking the least sum and the earliest prune,
  // none is missed. Only with positive durations, where memory and the tie rule are order-only.

  void gather_frontier() {
    frontier_.clear();  // reserved for the largest frontier: no allocation
    frontier_.push_back(last_start_);
    frontier_.push_back(potential_);
    frontier_.insert(frontier_.end(), free_.begin(), free_.end());
    frontier_.insert(frontier_.end(), link_free_.begin(), link_free_.end());
    for (int s = 0; s < stages_; ++s) {
      const int forwards = count_[slot(s, kForward)], backwards = count_[slot(s, kBackward)];
      if (s > 0)
        for (int m = forwards; m < count_[slot(s - 1, kForward)]; ++m) frontier_.push_back(forward_ready_[cell(s, m)]);
      for (int m = backwards; m < forwards; ++m) frontier_.push_back(forward_end_[cell(s, m)]);
      if (s + 1 < stages_)
        for (int m = backwards; m < count_[slot(s + 1, kBackward)]; ++m)
          frontier_.push_back(gradient_ready_[cell(s, m)]);
      if (split_)
        for (int m = count_[slot(s, kWeight)]; m < backwards; ++m) frontier_.push_back(backward_end_[cell(s, m)]);
    }
  }

  // Whether frontier `a` (with its last device) is no later than frontier `b` in every respect.
  static bool no_later(const double* a, int a_device, const double* b, int b_device, size_t size) {
    if (a[0] > b[0] || (a[0] == b[0] && a_device > b_device)) return false;
    for (size_t i = 1; i < size; ++i)
      if (a[i] > b[i]) return false;
    return true;
  }

  Bucket* find_bucket(bool create) {
    const size_t mask = table_.size() - 1;
    for (size_t i = hash_ & mask;; i = (i + 1) & mask) {
      Bucket& bucket = table_[i];
      if (bucket.counts < 0) {
        if (!create) return nullptr;
        bucket.hash = hash_;
        bucket.counts = static_cast<int64_t>(memo_counts_.size());
        memo_counts_.insert(memo_counts_.end(), count_.begin(), count_.end());
        ++table_used_;
        return &bucket;
      }
      if (bucket.hash == hash_ && std::equal(count_.begin(), count_.end(), memo_counts_.begin() + bucket.counts))
        return &bucket;
    }
  }

  bool dominated() {
    gather_frontier();
    const Bucket* bucket = find_bucket(false);
    if (bucket == nullptr) return false;
    for (int32_t e = bucket->head; e >= 0; e = entries_[e].next)
      if (no_later(&frontiers_[entries_[e].frontier], entries_[e].last_device, frontier_.data(), last_device_,
                   frontier_.size()))
        return true;
    return false;
  }

  // Records a node whose subtree has been searched to the end.
  void remember() {
    gather_frontier();
    // Half the budget in use: the vectors grow by doubling, so what they reserve stays within it.
    const size_t bytes = frontiers_.size() * sizeof(double) + entries_.size() * sizeof(Entry) +
                         memo_counts_.size() * sizeof(int) + table_.size() * sizeof(Bucket);
    const bool room = 2 * bytes <= memo_budget_;
    Bucket* bucket = find_bucket(false);
    if (bucket == nullptr) {
      if (!room) return;
      if ((table_used_ + 1) * 2 > table_.size()) grow_table();
      bucket = find_bucket(true);
    }
    // Entries the new one dominates can prune nothing it cannot; beyond a bucket's limit the oldest
    // go too, or a lookup would scan thousands of incomparable frontiers. Their room is reused.
    int kept = 0;
    for (int32_t* link = &bucket->head; *link >= 0;) {
      const int32_t e = *link;
      if (kept + 1 >= kEntriesPerBucket || no_later(frontier_.data(), last_device_, &frontiers_[entries_[e].frontier],
                                                    entries_[e].last_device, frontier_.size())) {
        *link = entries_[e].next;
        entries_[e].next = bucket->spare;
        bucket->spare = e;
      } else {
        ++kept;
        link = &entries_[e].next;
      }
    }
    int32_t e = bucket->spare;
    if (e >= 0) {
      bucket->spare = entries_[e].next;
      std::copy(frontier_.begin(), frontier_.end(), frontiers_.begin() + entries_[e].frontier);
    } else {
      if (!room) return;
      e = static_cast<int32_t>(entries_.size());
      entries_.push_back(Entry{static_cast<int64_t>(frontiers_.size()), -1, 0});
      frontiers_.insert(frontiers_.end(), frontier_.begin(), frontier_.end());
    }
    entries_[e].last_device = last_device_;
    entries_[e].next = bucket->head;
    bucket->head = e;
  }

  void grow_table() {
    std::vector<Bucket> old(table_.size() * 2);
    old.swap(table_);
    for (const Bucket& bucket : old) {
      if (bucket.counts < 0) continue;
      size_t i = bucket.hash & (table_.size() - 1);
      while (table_[i].counts >= 0) i = (i + 1) & (table_.size() - 1);
      table_[i] = bucket;
    }
  }

  // Fills the branches of the node at `depth`; returns how many.
  int collect(int depth) {
    Branch* out = &branches_[static_cast<size_t>(depth) * stages_ * kinds_];
    int n = 0;
    int advance_fits = -1;  // deferred memory check, evaluated once when first needed
    for (int s = 0; s < stages_; ++s) {
      const int d = device_of_[s];
      for (int k = 0; k < kinds_; ++k) {
        const int m = count_[slot(s, k)];
        if (m == microbatches_) continue;
        double ready = 0;
        if (k == kForward) {
          if (s > 0) {
            if (count_[slot(s - 1, kForward)] <= m) continue;
            ready = forward_ready_[cell(s, m)];
          }
        } else if (k == kBackward) {
          if (count_[slot(s, kForward)] <= m) continue;
          ready = forward_end_[cell(s, m)];
          if (s + 1 < stages_) {
            if (count_[slot(s + 1, kBackward)] <= m) continue;
            ready = std::max(ready, gradient_ready_[cell(s, m)]);
          }
        } else {
          if (count_[slot(s, kBackward)] <= m) continue;
          ready = backward_end_[cell(s, m)];
        }
        const double start = std::max(free_[d], ready);
        if (all_positive_) {
          if (start < last_start_ || (start == last_start_ && d < last_device_)) continue;
          if (k == kForward && static_memory_[d] + net_[d] + allocation_[s] > capacity_[d]) continue;
        } else {
          if (start < last_start_) continue;
          if (start > last_start_) {
            if (advance_fits < 0) advance_fits = levels_fit_at(last_start_) ? 1 : 0;
            if (advance_fits == 0) continue;
          }
        }
        static constexpr int32_t kRank[] = {1, 0, 2};
        out[n++] = Branch{start, s, k, m, kRank[k]};
      }
    }
    // Earliest start first, so that the first dive is a list schedule; at one start the lowest device
    // first, since placing a device's action there rules out the lower devices' actions at that start.
    auto before = [this](const Branch& a, const Branch& b) {
      if (a.start != b.start) return a.start < b.start;
      if (device_of_[a.stage] != device_of_[b.stage]) return device_of_[a.stage] < device_of_[b.stage];
      if (a.rank != b.rank) return a.rank < b.rank;
      if (a.microbatch != b.microbatch) return a.microbatch < b.microbatch;
      return a.stage < b.stage;
    };
    for (int i = 1; i < n; ++i)  // a handful of branches: insertion sort, no allocation
      for (int j = i; j > 0 && before(out[j], out[j - 1]); --j) std::swap(out[j], out[j - 1]);
    return n;
  }

  // The earliest a release can happen on device d, which an F that does not fit must wait for: the
  // end of one of the device's next backward actions.
  double release_floor(int d) const {
    const double floor = std::max(free_[d], last_start_);
    double earliest = kInfinity;
    for (int i = device_stage_begin_[d]; i < device_stage_begin_[d + 1]; ++i) {
      const int s = device_stages_[i];
      for (int k = kBackward; k < kinds_; ++k) {
        const int m = count_[slot(s, k)];
        if (m == microbatches_ || release_[slot(s, k)] <= 0) continue;
        double ready = floor;
        if (k == kBackward) {
          if (count_[slot(s, kForward)] > m) ready = std::max(ready, forward_end_[cell(s, m)]);
          if (s + 1 < stages_ && count_[slot(s + 1, kBackward)] > m)
            ready = std::max(ready, gradient_ready_[cell(s, m)]);
        } else if (count_[slot(s, kBackward)] > m) {
          ready = std::max(ready, backward_end_[cell(s, m)]);
        }
        earliest = std::min(earliest, ready + duration_[slot(s, k)]);
      }
    }
    return earliest;
  }

  // A lower bound on the makespan of every completion of the current node.
  double bound() {
    double bound = 0;
    for (int d = 0; d < devices_; ++d) bound = std::max(bound, free_[d]);
    const double floor = last_start_;  // canonical order: nothing starts before the last placement
    auto earliest = [&](int s, double ready) { return std::max({ready, free_[device_of_[s]], floor}); };
    for (int s = 0; s < stages_; ++s) {
      const int m = count_[slot(s, kForward)];
      double& estimate = estimate_[slot(s, kForward)];
      if (m == microbatches_) {
        estimate = kInfinity;
        continue;
      }
      double ready = 0;
      if (s > 0)
        ready = count_[slot(s - 1, kForward)] > m
                    ? forward_ready_[cell(s, m)]
                    : estimate_[slot(s - 1, kForward)] + duration_[slot(s - 1, kForward)] + forward_transfer_[s - 1];
      estimate = earliest(s, ready);
      const int d = device_of_[s];
      if (static_memory_[d] + net_[d] + allocation_[s] > capacity_[d]) estimate = std::max(estimate, release_floor(d));
      bound =
          std::max(bound, estimate + (microbatches_ - 1 - m) * duration_[slot(s, kForward)] + tail_[slot(s, kForward)]);
    }
    for (int s = stages_ - 1; s >= 0; --s) {
      const int m = count_[slot(s, kBackward)];
      double& estimate = estimate_[slot(s, kBackward)];
      if (m == microbatches_) {
        estimate = kInfinity;
        continue;
      }
      double ready = count_[slot(s, kForward)] > m ? forward_end_[cell(s, m)]
                                                   : estimate_[slot(s, kForward)] + duration_[slot(s, kForward)];
      if (s + 1 < stages_)
        ready = std::max(ready, count_[slot(s + 1, kBackward)] > m
                                    ? gradient_ready_[cell(s, m)]
                                    : estimate_[slot(s + 1, kBackward)] + duration_[slot(s + 1, kBackward)] +
                                          backward_transfer_[s + 1]);
      estimate = earliest(s, ready);
      bound = std::max(bound,
                       estimate + (microbatches_ - 1 - m) * duration_[slot(s, kBackward)] + tail_[slot(s, kBackward)]);
    }
    if (split_)
      for (int s = 0; s < stages_; ++s) {
        const int m = count_[slot(s, kWeight)];
        double& estimate = estimate_[slot(s, kWeight)];
        if (m == microbatches_) {
          estimate = kInfinity;
          continue;
        }
        const double ready = count_[slot(s, kBackward)] > m
                                 ? backward_end_[cell(s, m)]
                                 : estimate_[slot(s, kBackward)] + duration_[slot(s, kBackward)];
        estimate = earliest(s, ready);
        bound = std::max(bound, estimate + (microbatches_ - m) * duration_[slot(s, kWeight)]);
      }
    // A device cannot start its remaining work before the earliest of its next actions can start,
    // and (whole backward) its last action is followed by the rest of that micro-batch's chain.
    for (int d = 0; d < devices_; ++d) {
      if (remaining_actions_[d] == 0) continue;
      double start = kInfinity, tail = split_ ? 0.0 : kInfinity;
      for (int i = device_stage_begin_[d]; i < device_stage_begin_[d + 1]; ++i) {
        const int s = device_stages_[i];
        for (int k = 0; k < kinds_; ++k) start = std::min(start, estimate_[slot(s, k)]);
        if (!split_ && end_tail_[s] >= 0 && count_[slot(s, kBackward)] < microbatches_)
          tail = std::min(tail, end_tail_[s]);
      }
      if (tail == kInfinity) tail = 0;
      bound = std::max(bound, start + remaining_[d] + tail);
    }
    return bound;
  }

  void dfs(int depth) {
    ++nodes_;
    if (out_of_time()) return;
    if (depth == total_actions_) {
      if (!all_positive_ && !levels_fit_at(last_start_)) return;
      double makespan = 0;
      for (int d = 0; d < devices_; ++d) makespan = std::max(makespan, free_[d]);
      if (makespan < best_) {
        best_ = makespan;
        best_path_.assign(path_.begin(), path_.end());
      }
      return;
    }
    const bool memo = memo_enabled_ && depth > 0;
    if (memo && dominated()) return;
    const int n = collect(depth);
    const Branch* branches = &branches_[static_cast<size_t>(depth) * stages_ * kinds_];
    for (int i = 0; i < n && !stopped_; ++i) {
      const Branch c = branches[i];
      const int s = c.stage, k = c.kind, m = c.microbatch, d = device_of_[s];
      const double end = c.start + duration_[slot(s, k)];
      // Saved for the undo; the per-cell times need none, being read only once their producer is placed.
      const double saved_free = free_[d], saved_net = net_[d], saved_remaining = remaining_[d];
      const double saved_pending = pending_release_[d], saved_last_start = last_start_;
      const int saved_last_device = last_device_;
      int link = -1;
      double saved_link_free = 0;

      if (k == kForward) {
        forward_end_[cell(s, m)] = end;
        net_[d] += allocation_[s];
        pending_release_[d] = 0;
        if (s + 1 < stages_) {
          link = forward_link_[s];
          double arrival = end;
          if (link >= 0) {
            saved_link_free = link_free_[link];
            arrival = std::max(end, link_free_[link]) + forward_transfer_[s];
            link_free_[link] = arrival;
          }
          forward_ready_[cell(s + 1, m)] = arrival;
        }
      } else {
        if (k == kBackward) {
          backward_end_[cell(s, m)] = end;
          if (s > 0) {
            link = backward_link_[s];
            double arrival = end;
            if (link >= 0) {
              saved_link_free = link_free_[link];
              arrival = std::max(end, link_free_[link]) + backward_transfer_[s];
              link_free_[link] = arrival;
            }
            gradient_ready_[cell(s - 1, m)] = arrival;
          }
        }
        net_[d] -= release_[slot(s, k)];
        pending_release_[d] = release_[slot(s, k)];
      }
      free_[d] = end;
      remaining_[d] -= duration_[slot(s, k)];
      --remaining_actions_[d];
      ++count_[slot(s, k)];
      const uint64_t saved_hash = hash_;
      const double saved_potential = potential_;
      hash_ ^= zobrist_[static_cast<size_t>(slot(s, k)) * (microbatches_ + 1) + m] ^
               zobrist_[static_cast<size_t>(slot(s, k)) * (microbatches_ + 1) + m + 1];
      potential_ += c.start;
      last_start_ = c.start;
      last_device_ = d;
      path_[depth] = PlacedAction{s, k, m};

      if (bound() < best_ * (1 - 1e-12)) dfs(depth + 1);

      --count_[slot(s, k)];
      hash_ = saved_hash;
      potential_ = saved_potential;
      ++remaining_actions_[d];
      remaining_[d] = saved_remaining;
      free_[d] = saved_free;
      net_[d] = saved_net;
      pending_release_[d] = saved_pending;
      last_start_ = saved_last_start;
      last_device_ = saved_last_device;
      if (link >= 0) link_free_[link] = saved_link_free;
    }
    if (memo && !stopped_) remember();
  }

  const Schedule& skeleton_;
  const int stages_, microbatches_, devices_, kinds_;
  const bool split_;
  double best_;
  const double time_limit_;
  const int64_t max_nodes_;
  const size_t memo_budget_;  // bytes

  // The instance, flattened: per stage, per (stage, kind) slot, per device.
  std::vector<int> device_of_;
  std::vector<double> duration_, release_, allocation_, tail_, end_tail_;
  std::vector<int> forward_link_, backward_link_;
  std::vector<double> forward_transfer_, backward_transfer_;
  std::vector<int> device_stage_begin_, device_stages_;
  std::vector<double> static_memory_, capacity_;
  bool all_positive_ = true;
  int total_actions_ = 0;

  // The node: placed counts per slot, the times placed producers fixed per (stage, micro-batch), and
  // per device its free time, net allocation, remaining work and the release of its last action.
  std::vector<int> count_;
  std::vector<double> forward_ready_, gradient_ready_, forward_end_, backward_end_;
  std::vector<double> free_, net_, pending_release_, remaining_, link_free_;
  std::vector<int> remaining_actions_;
  std::vector<double> estimate_;
  double last_start_ = 0;
  int last_device_ = -1;
  std::vector<PlacedAction> path_, best_path_;
  std::vector<Branch> branches_;  // one block per depth

  // Dominance memo (positive durations only, see remember()): per placed set (the counts, hashed),
  // the frontiers of the nodes whose subtrees were searched to the end.
  bool memo_enabled_ = false;
  std::vector<uint64_t> zobrist_;  // per (slot, count)
  uint64_t hash_ = 0;
  double potential_ = 0;  // sum of the placed start times
  std::vector<Bucket> table_;
  size_t table_used_ = 0;
  std::vector<int> memo_counts_;
  std::vector<Entry> entries_;
  std::vector<double> frontiers_;
  std::vector<double> frontier_;  // the current node's

  int64_t nodes_ = 0;
  bool stopped_ = false;
  Clock::time_point started_;
};

}  // namespace

ExactResult exact_schedule(const Schedule& skeleton, const CostTable& costs, bool split_backward,
                           const ExactOptions& options) {
  check_input(skeleton, costs, split_backward);
  BranchAndBound search(skeleton, costs, split_backward, options);
  return search.run(costs);
}

}  // namespace flexpipe
