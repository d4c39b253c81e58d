#include "flexpipe/core/schedule_choice.h"

#include <algorithm>

#include "flexpipe/core/builtin_schedules.h"
#include "flexpipe/core/error.h"
#include "flexpipe/core/lowering.h"
#include "flexpipe/core/simulator.h"
#include "flexpipe/core/trainable_model.h"

namespace flexpipe {

std::vector<ScheduleCandidate> rank_builtin_schedules(const CostGraph& graph, int devices, int microbatches,
                                                      const AggregationOptions& aggregation) {
  std::vector<ScheduleCandidate> candidates;
  for (const BuiltinSchedule& builtin : builtin_schedules()) {
    ScheduleCandidate c;
    c.name = builtin.name;
    try {
      const Schedule schedule = make_builtin(builtin.name, {devices, microbatches, 0});
      const Partition partition = partition_balanced(graph, schedule.stages_per_pipeline);
      const CostTable costs = aggregate_stages(graph, partition, aggregation).table;
      const SimResult result = simulate(lower(schedule), costs, {false, true});
      c.makespan = result.makespan;
      c.bubble_ratio = result.bubble_ratio;
      c.fits = result.fits;
      for (const DeviceReport& d : result.devices) c.peak_memory = std::max(c.peak_memory, d.peak_memory);
    } catch (const Error& e) {
      c.skipped = e.what();
    }
    candidates.push_back(std::move(c));
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const ScheduleCandidate& a, const ScheduleCandidate& b) {
    const int ra = a.skipped.empty() ? (a.fits ? 0 : 1) : 2, rb = b.skipped.empty() ? (b.fits ? 0 : 1) : 2;
    if (ra != rb) return ra < rb;
    return ra < 2 && a.makespan < b.makespan;
  });
  return candidates;
}

}  // namespace flexpipe
