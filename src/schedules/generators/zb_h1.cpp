// ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024), the order of PyTorch
// ScheduleInterleavedZeroBubble (ZB1P) with one stage per device. It is 1F1B with every backward
// split into I (input gradient, on the critical path) and W (weight gradient, free to move):
// device r runs min(m, p-r-1) warm-up forwards, then F and I in turn, but holds its first r W's
// back; each later I is followed by the oldest pending W, and the held W's close the list. The
// input gradients thus reach device 0 without waiting for any W, and device r's r held W's fill
// the tail while the last input gradients travel the r hops to device 0.
#include <algorithm>
#include <string>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

Schedule build(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches;
  Schedule schedule = make_schedule("zb-h1", p, m, loop_placement(p, p));
  for (int device = 0; device < p; ++device) {
    std::vector<Action>& actions = schedule.device_actions[device];
    actions.reserve(3 * m);
    const int warmup = std::min(m, p - device - 1);
    const int held_back = device;
    int next_forward = 0, next_weight = 0;
    while (next_forward < warmup) actions.push_back(Action::make(ActionKind::F, device, next_forward++));
    for (int mb = 0; mb < m; ++mb) {
      if (next_forward < m) actions.push_back(Action::make(ActionKind::F, device, next_forward++));
      actions.push_back(Action::make(ActionKind::I, device, mb));
      if (mb >= held_back) actions.push_back(Action::make(ActionKind::W, device, next_weight++));
    }
    while (next_weight < m) actions.push_back(Action::make(ActionKind::W, device, next_weight++));
  }
  return schedule;
}

}  // namespace

Schedule generate_zb_h1(const ScheduleParams& params) { return build(params); }

}  // namespace flexpipe::schedules
