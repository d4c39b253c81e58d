// flexpipe partition's request and its planner: the model built and the schedule loaded as the command
// line names them, the planner's settings (memory limit, host link, solver, micro-batch search, time
// budget), and the advice for a model that does not fit.
#pragma once
#include <chrono>
#include <functional>
#include <string>

#include "flexpipe/partition/checked_planner.h"
#include "flexpipe/support/quantity.h"
#include "flexpipe/workflow/model_inputs.h"
#include "flexpipe/workflow/schedule_loading.h"

namespace flexpipe {

struct PartitionRequest {
  NamedModel model;
  ScheduleOptions schedule;
  Quantity memory_limit;       // value 0: not given (the hardware profile's memory, hardware_memory)
  double host_bandwidth = -1;  // bytes per second; -1: the hardware's PCIe
  std::string method = "dawn";
  std::string solver = "auto";  // exact, greedy or auto
  bool max_batch = false;
  int max_batch_limit = 4096;
  double time_budget = 0;  // seconds, reading included; 0: none
};

// What the planner tells its caller while it works: a line for each phase, and a tick between (where
// the caller may print the latest line).
struct PlannerProgress {
  std::function<void(const std::string&)> say;
  std::function<void()> tick;
};

// The planner for the request: the model built and the schedule loaded and checked. Past the time
// budget (counted from `start`) its searches answer with the best plan found by then. Throws Error for
// a fractional micro-batch, or a schedule with more stages than the model has operators.
CheckedPlanner partition_planner(const PartitionRequest& request, std::chrono::steady_clock::time_point start,
                                 const PlannerProgress& progress);

// The memory of a hardware profile as a limit: --memory-limit's default, in the decimal units its
// datasheet gives (80.00 GB for H100-80GB). Throws Error for an unknown profile.
Quantity hardware_memory(const std::string& hardware);

// Why a plan does not fit, and what would change that: more devices, a smaller micro-batch, a schedule
// that holds fewer micro-batches, a faster host link (only what would change something).
std::string does_not_fit(const CheckedPlan& out, const CheckedPlanner& planner, const PartitionRequest& request);

}  // namespace flexpipe
