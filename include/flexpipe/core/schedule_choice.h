#pragma once
// Picks a schedule for a model: every built-in that accepts the device and micro-batch counts is
// partitioned (balanced by operator time), costed from the model's cost graph (measured or analytic)
// and simulated; the fastest that fits in memory wins. A stand-in for the automated scheduler, which
// searches a far larger space.
#include <string>
#include <vector>

#include "flexpipe/core/cost_graph.h"
#include "flexpipe/core/stage_aggregation.h"

namespace flexpipe {

struct ScheduleCandidate {
  std::string name;
  double makespan = 0;
  double bubble_ratio = 0;
  double peak_memory = 0;  // the largest device's, in the graph's bytes
  bool fits = true;
  std::string skipped;     // why the built-in was not simulated ("needs an even number of devices"); "" if it was
};

// One entry per built-in, simulated ones first from fastest to slowest (those that do not fit after
// those that do), then the skipped ones. `aggregation` supplies the shape, byte sizes and capacity.
std::vector<ScheduleCandidate> rank_builtin_schedules(const CostGraph& graph, int devices, int microbatches,
                                                      const AggregationOptions& aggregation);

}  // namespace flexpipe
