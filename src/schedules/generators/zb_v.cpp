// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", arXiv 2401.10241, section 6), the order of
// PyTorch's ScheduleZBVZeroBubble. 2p stages in a V: device d holds stage d (first leg, forward
// flows 0 -> p-1) and stage 2p-1-d (second leg, forward flows back p-1 -> 0), so a micro-batch's
// forward turns on device p-1 and its loss is on device 0. Each device runs a phase program:
//   2(p-d)-1 first-leg F; d pairs (second-leg F, first-leg F); p-d triples (second-leg F, I, W);
//   then the steady block (first-leg F, I, W, second-leg F, I, W) until every F is out;
//   then d pairs of I (first leg, second leg), p-d pairs (first-leg I, W) and the held W's.
// With F = I = W and m >= 2p-1 every device works without a gap from its first to its last action
// while holding at most 2p chunk activations (p micro-batches of a full stage, as 1F1B).
// The program is written for max(m, 2p-1) micro-batches and the extra ones are dropped: removing
// every action of some micro-batches keeps the order valid, since dependencies never cross
// micro-batches.
#include <algorithm>
#include <string>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

// Appends one leg's actions in micro-batch order, skipping the padding micro-batches.
class LegEmitter {
 public:
  LegEmitter(std::vector<Action>& actions, int stage, int microbatches)
      : actions_(actions), stage_(stage), microbatches_(microbatches) {}
  void forward() { emit(ActionKind::F, forwards_++); }
  void input() { emit(ActionKind::I, inputs_++); }
  void weight() { emit(ActionKind::W, weights_++); }
  int forwards() const { return forwards_; }
  bool weights_pending() const { return weights_ < inputs_; }

 private:
  void emit(ActionKind kind, int microbatch) {
    if (microbatch < microbatches_) actions_.push_back(Action::make(kind, stage_, microbatch));
  }
  std::vector<Action>& actions_;
  int stage_, microbatches_;
  int forwards_ = 0, inputs_ = 0, weights_ = 0;
};

Schedule build(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches;
  const int padded = std::max(m, 2 * p - 1);
  Schedule schedule = make_schedule("zb-v", p, m, v_placement(p, 2 * p));
  for (int d = 0; d < p; ++d) {
    std::vector<Action>& actions = schedule.device_actions[d];
    actions.reserve(6 * m);
    LegEmitter first(actions, d, m), second(actions, 2 * p - 1 - d, m);
    for (int i = 0; i < 2 * (p - d) - 1; ++i) first.forward();
    for (int i = 0; i < d; ++i) {
      second.forward();
      first.forward();
    }
    for (int i = 0; i < p - d; ++i) {
      second.forward();
      second.input();
      second.weight();
    }
    while (second.forwards() < first.forwards() || first.forwards() < padded) {
      if (first.forwards() < padded) first.forward();
      first.input();
      first.weight();
      second.forward();
      second.input();
      second.weight();
    }
    for (int i = 0; i < d; ++i) {
      first.input();
      second.input();
    }
    for (int i = 0; i < p - d; ++i) {
      first.input();
      first.weight();
    }
    while (second.weights_pending()) second.weight();
    while (first.weights_pending()) first.weight();
  }
  return schedule;
}

}  // namespace

Schedule generate_zb_v(const ScheduleParams& params) { return build(params); }

}  // namespace flexpipe::schedules
