// A list scheduler in real (cost-table) time: it writes every device's list of F, B (or I and W)
// actions by running the pipeline forward in time and, whenever a device can start something,
// starting the most urgent action its policy allows. Memory is accounted with the simulator's rules
// (docs/simulator.md, "Memory"), so a forward waits until the device has room for it. The
// automated scheduler (schedule_search.h) turns its knobs; the simulator has the last word on time.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"

namespace flexpipe {

// When the weight-gradient half of a split backward runs.
enum class WeightTiming : uint8_t {
  FillIdle,  // whenever the device has nothing more urgent ready (Zero Bubble's bubble filling)
  Late,      // only when a forward is held back by memory or the in-flight limit, or nothing else is left
};

// Which ready forward a device starts first when it holds several stages.
enum class ForwardOrder : uint8_t {
  Oldest,   // the lowest micro-batch (then the later stage): finishes micro-batches, holds less memory
  Shallow,  // the earliest stage (then the lowest micro-batch): fills the pipeline sooner
};

struct ListPolicy {
  bool split_backward = false;  // I and W instead of B
  bool backward_first = true;   // a ready backward beats a ready forward (1F1B); false: forwards first
  WeightTiming weight = WeightTiming::FillIdle;
  ForwardOrder forward = ForwardOrder::Oldest;
  // Per device: the most forwards whose backward (B, or I and W) has not ended, i.e. the micro-batches
  // of activations it may hold; 0 or less: no limit
  // (memory alone holds forwards back). Empty: no limit anywhere.
  std::vector<int> inflight;
  friend bool operator==(const ListPolicy&, const ListPolicy&) = default;
};

// One line for reports: "split, W fill-idle, backward first, oldest, in flight [4,3,2,1]".
std::string describe(const ListPolicy& policy);

// Fills `schedule.device_actions` (placement, pipelines, micro-batch routing and count set; any
// actions there are replaced) with compute-only lists: F and B, or F, I and W, each stage running its
// pipeline's micro-batches in increasing order within each kind. `recompute_stage` /
// `offload_stage` (per stage, or empty) say which stages recompute or offload: their memory follows
// the simulator's rules once add_memory_actions has placed R / OFFLOAD / RELOAD, and a recomputing
// stage's backward takes R longer. Transfers take their link's time without contention. Returns false, leaving the
// lists partial, when the policy stalls: no device can start anything while actions remain (an in-flight limit or a
// memory capacity too small for the placement).
bool list_schedule(Schedule& schedule, const CostTable& costs, const ListPolicy& policy,
                   const std::vector<char>& recompute_stage = {}, const std::vector<char>& offload_stage = {});

}  // namespace flexpipe
