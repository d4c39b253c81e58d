// The lower bound every schedule's makespan is measured against (docs/simulator.md, "Lower
// bound"): no schedule beats its busiest device's work, nor one micro-batch's critical path.
#include <algorithm>
#include <string>

#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"
#include "simulator_detail.h"

namespace flexpipe {

namespace sim {

double compute_duration(const Schedule& schedule, const CostTable& costs, const Action& action) {
  auto stage_costs = [&](int stage) -> const StageCosts& { return costs.stages[schedule.chunk_of_stage(stage)]; };
  switch (action.kind) {
    case ActionKind::F: return stage_costs(action.stage).forward;
    case ActionKind::B: return stage_costs(action.stage).backward;
    case ActionKind::I: return stage_costs(action.stage).backward_input;
    case ActionKind::W: return stage_costs(action.stage).backward_weight;
    case ActionKind::R: return stage_costs(action.stage).recompute;
    case ActionKind::Opt: return stage_costs(action.stage).optimizer;
    case ActionKind::Overlap: {
      const StageCosts& backward = stage_costs(action.stage2);
      return costs.overlap_ratio * (stage_costs(action.stage).forward +
                                    (action.sub_kind == ActionKind::I ? backward.backward_input : backward.backward));
    }
    case ActionKind::Custom: {
      const CustomOpKind& op = schedule.custom_ops[action.custom];
      return op.communicates ? 0.0 : op.duration;
    }
    default: return 0;
  }
}

double critical_path(const Schedule& schedule, const CostTable& costs, std::span<const uint8_t> split_stage) {
  std::vector<uint8_t> used(schedule.num_pipelines, 0);
  if (schedule.microbatch_pipeline.empty()) used[0] = 1;
  for (int32_t pipeline : schedule.microbatch_pipeline) used[pipeline] = 1;

  const int chunks = schedule.stages_per_pipeline;
  double longest = 0;
  for (int pipeline = 0; pipeline < schedule.num_pipelines; ++pipeline) {
    if (!used[pipeline]) continue;
    const int first = pipeline * chunks;
    double path = split_stage[first] ? costs.stages[0].backward_weight : 0.0;
    for (int chunk = 0; chunk < chunks; ++chunk) {
      const StageCosts& stage = costs.stages[chunk];
      path += stage.forward + (split_stage[first + chunk] ? stage.backward_input : stage.backward);
      if (chunk + 1 == chunks) continue;
      const int here = schedule.stage_device[first + chunk];
      const int next = schedule.stage_device[first + chunk + 1];
      if (here != next)
        path += costs.link_between(here, next).transfer_time(stage.output_bytes) +
                costs.link_between(next, here).transfer_time(stage.output_bytes);
    }
    longest = std::max(longest, path);
  }
  return longest;
}

}  // namespace sim

double lower_bound(const Schedule& schedule, const CostTable& costs) {
  if (std::string problem = sim::schedule_shape_problem(schedule); !problem.empty()) throw Error(problem);
  check_cost_table(costs, schedule.stages_per_pipeline, schedule.num_devices, "cost table");
  std::vector<uint8_t> split_stage(schedule.num_stages(), 0);
  double busiest = 0;
  for (int d = 0; d < schedule.num_devices; ++d) {
    const auto& list = schedule.device_actions[d];
    double work = 0;
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& action = list[i];
      if (std::string problem = sim::action_problem(schedule, d, static_cast<int>(i), action); !problem.empty())
        throw Error(problem);
      work += sim::compute_duration(schedule, costs, action);
      if (action.kind == ActionKind::I) split_stage[action.stage] = 1;
      if (action.kind == ActionKind::Overlap && action.sub_kind == ActionKind::I) split_stage[action.stage2] = 1;
    }
    busiest = std::max(busiest, work);
  }
  return std::max(busiest, sim::critical_path(schedule, costs, split_stage));
}

}  // namespace flexpipe
