// A model as a command names it: a zoo name timed on a hardware profile, or a cost-graph file; the
// stage cost table it makes under a partition, and a partition plan file applied to a schedule.
#pragma once
#include <functional>
#include <string>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/cost_table.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/partition/plan.h"

namespace flexpipe {

// A model graph named on the command line (zoo name or cost-graph file) and how to time it.
struct NamedModel {
  std::string model;  // empty: no model
  std::string hardware = "H100-80GB";
  double microbatch_size = 1;
  double seq_len = 0;  // 0: the model's own
  bool flash_attention = false;
};

// A zoo model built on the profile, or a cost-graph file (.json). `progress`, when set, hears a line
// before and after reading a file: a large graph takes seconds.
CostGraph load_model_graph(const NamedModel& options, const std::function<void(const std::string&)>& progress = {});
// Whether the graph's times are in a unit of time (ns to h) that a rate per second converts into; a
// graph in abstract time ("unit") has no seconds, so a hardware's rates say nothing about it.
bool rates_convert(const CostGraph& graph);
// A rate per second in the graph's time unit (zoo models and measured graphs use milliseconds); an
// infinite rate or 0 as it is, in any unit; otherwise throws Error for a unit it cannot convert.
double per_time_unit(const CostGraph& graph, double per_second);
// The stage cost table of the model under a partition (a --partition spec, partition_forms.h) for `stages` stages.
CostTable model_cost_table(const NamedModel& options, const std::string& partition, int stages);
// A partition plan file applied to `schedule`: its model's graph rebuilt at the plan's shape, the
// schedule with the plan's R / OFFLOAD / RELOAD, the cost table with its decisions; the memory limit is
// the plan's unless `memory_limit` > 0.
AppliedPlan apply_plan_file(const std::string& path, const Schedule& schedule, double memory_limit);

}  // namespace flexpipe
