// 1F1B, also PipeDream-Flush (Narayanan et al. 2021), in Megatron's and PyTorch Schedule1F1B's
// order: device r runs min(m, p-r-1) warm-up forwards, then alternates one forward and one full
// backward, then drains the remaining backwards. At most min(m, p-r) micro-batches are in flight on
// device r. Any m >= 1: with m < p the warm-up is bounded by m, as Megatron-LM and the Zero Bubble
// fork allow (PyTorch's Schedule1F1B refuses it); devices r < p-m then run GPipe's order.
#include <algorithm>
#include <string>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

Schedule build(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches;
  Schedule schedule = make_schedule("1f1b", p, m, loop_placement(p, p));
  for (int device = 0; device < p; ++device) {
    std::vector<Action>& actions = schedule.device_actions[device];
    actions.reserve(2 * m);
    const int warmup = std::min(m, p - device - 1);
    for (int mb = 0; mb < warmup; ++mb) actions.push_back(Action::make(ActionKind::F, device, mb));
    for (int mb = 0; mb < m - warmup; ++mb) {
      actions.push_back(Action::make(ActionKind::F, device, warmup + mb));
      actions.push_back(Action::make(ActionKind::B, device, mb));
    }
    for (int mb = m - warmup; mb < m; ++mb) actions.push_back(Action::make(ActionKind::B, device, mb));
  }
  return schedule;
}

}  // namespace

Schedule generate_1f1b(const ScheduleParams& params) { return build(params); }

}  // namespace flexpipe::schedules
