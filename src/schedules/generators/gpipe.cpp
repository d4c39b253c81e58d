// GPipe (Huang et al. 2019), in PyTorch ScheduleGPipe's order: every forward in micro-batch order,
// then every full backward in the same order.
#include <string>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

Schedule build(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches;
  Schedule schedule = make_schedule("gpipe", p, m, loop_placement(p, p));
  for (int device = 0; device < p; ++device) {
    std::vector<Action>& actions = schedule.device_actions[device];
    actions.reserve(2 * m);
    for (int mb = 0; mb < m; ++mb) actions.push_back(Action::make(ActionKind::F, device, mb));
    for (int mb = 0; mb < m; ++mb) actions.push_back(Action::make(ActionKind::B, device, mb));
  }
  return schedule;
}

}  // namespace

Schedule generate_gpipe(const ScheduleParams& params) { return build(params); }

}  // namespace flexpipe::schedules
