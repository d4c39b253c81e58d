// The simulation-checked planner behind `flexpipe partition`: partition plans that a simulation confirms fit.
// Each plan is applied to the schedule (R / OFFLOAD / RELOAD where it recomputes or offloads) and simulated; where a
// device ends up over the limit, its stages' budgets are lowered and the plan made again (docs/partitioner.md).
#pragma once
#include <functional>
#include <string>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/hardware.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/partition/partitioner.h"
#include "flexpipe/partition/plan.h"
#include "flexpipe/sim/simulator.h"

namespace flexpipe {

// What the planner is asked for besides the graph, the hardware and the schedule.
struct PlannerSettings {
  std::string model;     // zoo name or cost-graph file, as the user gave it: recorded in the plan
  std::string schedule;  // built-in name or file: recorded in the plan
  int chunks = 0;        // the schedule's stages per device per pipeline, recorded in the plan; 0: its default
  int microbatch_size = 1;
  double seq_len = 0;                       // 0: the graph's reference
  double memory_limit = 0;                  // bytes per device
  double host_bandwidth = 0;                // bytes per second, recorded in the plan
  double host_bandwidth_per_time_unit = 0;  // the same in the graph's time unit, what the model uses
  MemorySolver solver = MemorySolver::Auto;
  // Plan for the largest micro-batch size (up to max_batch_limit) that fits and passes the simulation check.
  bool max_batch = false;
  int max_batch_limit = 4096;
  // What the planner is doing, at every step of its long phases (and after every stage evaluation):
  // "dawn, micro-batch 4, round 1: bisection, step 3, period 1.25 ms, 120 stage evaluations". Empty:
  // nothing is said.
  std::function<void(const std::string&)> progress;
  // Asked between steps (PartitionProblem::should_stop): once true, each partitioner run answers with
  // the best partition it has found (the planner's time budget). Empty: never.
  std::function<bool()> should_stop;
};

// One method's plan and what the simulation made of it.
struct CheckedPlan {
  PartitionMethod method = PartitionMethod::Dawn;
  int microbatch_size = 1;
  int max_microbatch_size = -1;  // -1: not searched
  PartitionResult result;
  PartitionPlan plan;
  SimResult simulated;
  bool simulated_ok = false;
  int rounds = 0;        // plans made until the simulation agreed
  double seconds = 0;    // the partitioner's own time, simulations included
  bool stopped = false;  // should_stop ended a search before it finished: the plan is the best found by then
  // The model found a plan and its simulation fits the limit.
  bool passes() const { return result.fits && simulated_ok && simulated.fits; }
};

class CheckedPlanner {
 public:
  CheckedPlanner(CostGraph graph, const HardwareProfile& hardware, Schedule schedule, PlannerSettings settings);

  PartitionProblem problem(int microbatch_size) const;
  // With max_batch, when the model's largest micro-batch size fails the simulation check, the largest size below
  // it that passes is searched for (largest_passing_below: passing is not monotone in the size).
  CheckedPlan plan(PartitionMethod method) const;

  const CostGraph& graph() const { return graph_; }
  const Schedule& schedule() const { return schedule_; }
  double seq_len() const { return seq_len_; }

 private:
  CheckedPlan attempt(PartitionMethod method, int microbatch_size) const;
  // `label` names the candidate in progress messages ("dawn", "dawn (compute-balanced cuts)").
  template <class Candidate>
  CheckedPlan attempt(PartitionMethod method, int microbatch_size, const std::string& label, Candidate candidate) const;
  // A partitioner's progress as settings' progress hears it: "CONTEXT: PHASE, step N, ...".
  std::function<void(const PartitionProgress&)> progress_saying(const std::string& context) const;
  PartitionPlan make_plan(const CheckedPlan& out, const PartitionProblem& p) const;
  void summarize(CheckedPlan& out) const;

  CostGraph graph_;
  const HardwareProfile* hardware_ = nullptr;
  Schedule schedule_;
  PlannerSettings settings_;
  double seq_len_ = 1;
};

}  // namespace flexpipe
