// ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section 2.2), built here from
// its description: more warm-up forwards fill the bubble before the first input gradient, and the
// weight gradients are reordered at the tail so that the layout becomes a parallelogram.
//
// Device r runs w = min(m, 2(p-r)-1) warm-up forwards: with F = I = W its first I can start at
// 2p-1-r, so exactly that many forwards fit before it. Then, after each I(j):
//   - while j < m-2p+1 (the steady part) the oldest pending W, then the next forward: one F, one I
//     and one W per micro-batch, so the W's keep up and at most w micro-batches are in flight;
//   - from j = m-2p+1 on (the tail) the next forward if one is left, else the oldest pending W.
// In the tail device 0 has no forward left and alternates I and W, so its input gradients come
// every 2 units instead of 3; device r still owes 2r forwards, runs them in place of W's and ends
// with 2r+1 W's, exactly the slots while the last input gradients travel to device 0. With
// F = I = W every device is then busy without a gap from its first action to its last if and only
// if m >= 2p-1 (with fewer, device 0 runs out of forwards before its first I can start).
#include <algorithm>
#include <string>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

Schedule build(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches;
  Schedule schedule = make_schedule("zb-h2", p, m, loop_placement(p, p));
  const int tail_start = m - 2 * p + 1;
  for (int device = 0; device < p; ++device) {
    std::vector<Action>& actions = schedule.device_actions[device];
    actions.reserve(3 * m);
    const int warmup = std::min(m, 2 * (p - device) - 1);
    int next_forward = 0, next_weight = 0;
    while (next_forward < warmup) actions.push_back(Action::make(ActionKind::F, device, next_forward++));
    for (int mb = 0; mb < m; ++mb) {
      actions.push_back(Action::make(ActionKind::I, device, mb));
      if (mb < tail_start) {
        actions.push_back(Action::make(ActionKind::W, device, next_weight++));
        if (next_forward < m) actions.push_back(Action::make(ActionKind::F, device, next_forward++));
      } else if (next_forward < m) {
        actions.push_back(Action::make(ActionKind::F, device, next_forward++));
      } else {
        actions.push_back(Action::make(ActionKind::W, device, next_weight++));
      }
    }
    while (next_weight < m) actions.push_back(Action::make(ActionKind::W, device, next_weight++));
  }
  return schedule;
}

}  // namespace

Schedule generate_zb_h2(const ScheduleParams& params) { return build(params); }

}  // namespace flexpipe::schedules
