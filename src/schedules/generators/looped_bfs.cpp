// Looped BFS (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"), in PyTorch
// ScheduleLoopedBFS's order: device r holds v chunks, stages c*p + r; it runs every forward of its
// first chunk, then of its second, ..., then every backward of its last chunk, then of the one
// before, ..., each chunk's backwards from the last micro-batch down to the first.
#include <string>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

Schedule build(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches, v = params.chunks;
  Schedule schedule = make_schedule("looped-bfs", p, m, loop_placement(p, p * v));
  for (int device = 0; device < p; ++device) {
    std::vector<Action>& actions = schedule.device_actions[device];
    actions.reserve(2 * m * v);
    for (int chunk = 0; chunk < v; ++chunk)
      for (int mb = 0; mb < m; ++mb) actions.push_back(Action::make(ActionKind::F, chunk * p + device, mb));
    for (int chunk = v - 1; chunk >= 0; --chunk)
      for (int mb = m - 1; mb >= 0; --mb) actions.push_back(Action::make(ActionKind::B, chunk * p + device, mb));
  }
  return schedule;
}

}  // namespace

Schedule generate_looped_bfs(const ScheduleParams& params) { return build(params); }

}  // namespace flexpipe::schedules
