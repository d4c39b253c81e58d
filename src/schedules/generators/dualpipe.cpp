// DualPipe (DeepSeek-V3 technical report, arXiv 2412.19437; deepseek-ai/DualPipe dualpipe.py) and
// DualPipeV, its "cut-in-half" V form (Sea AI Lab; dualpipev.py, PyTorch ScheduleDualPipeV).
//
// Both run DeepSeek's eight phases on every device, over the two stages ("legs") the device holds.
// With n ranks in the phase program, a device of rank r and k micro-batches per leg runs:
//   1. 2(n-r-1) x F0                   5. (n-r-1) x (B1, F1&B0)
//   2. (r+1) x (F0, F1)                6. (r+1) x (B1, B0), split into I/W from the middle pair on
//   3. (n-r-1) x (I1, W, F1)           7. (n-r-1) x (W, I0)
//   4. (k-2n+r+1) x (F0&B1, F1&B0)     8. (r+1) x W
// where X&Y is one Overlap action (forward and full backward overlapped, DualPipe's F&B), I queues
// its W and W runs the oldest queued one. The first pair of phase 4 is not overlapped on the rank
// where the two legs meet (F0 then B1), which shortens the critical path there.
//
// DualPipeV: p devices, 2p stages in a V (v_placement); device r is rank r, leg 0 is stage r and
//   leg 1 is stage 2p-1-r; n = p, k = m.
// DualPipe: p devices (p even), two pipelines of p stages in opposite directions
//   (bidirectional_placement); the first m/2 micro-batches run in pipeline 0, the rest in pipeline 1.
//   Device d is rank min(d, p-1-d) of n = p/2; leg 0 is the direction whose first half holds d
//   (pipeline 0 for d < p/2, pipeline 1 otherwise); k = m/2.
//
// With F = I = W, B = I + W, F&B = overlap_ratio (F + B) and F&B >= B, the idlest device (DualPipe's
// middle ranks, DualPipeV's last) idles (S/2 - 1)(F&B + B - 3W) of the makespan, S the number of
// stages per pipeline (DualPipe p, DualPipeV 2p); with overlap_ratio = 1 every device does.
#include <algorithm>
#include <array>
#include <deque>
#include <string>

#include <fmt/format.h>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

// One device's phase program over its two legs; counts micro-batches per leg.
class PhaseProgram {
 public:
  // first_microbatch[leg]: the global micro-batch id of the leg's k-th micro-batch is first + k.
  PhaseProgram(std::vector<Action>& actions, std::array<int, 2> stage, std::array<int, 2> first_microbatch)
      : actions_(actions), stage_(stage), first_microbatch_(first_microbatch) {}

  void forward(int leg) { actions_.push_back(Action::make(ActionKind::F, stage_[leg], next_forward(leg))); }
  // A split backward runs I now and queues its W.
  void backward(int leg, bool split = false) {
    const int mb = next_backward(leg);
    actions_.push_back(Action::make(split ? ActionKind::I : ActionKind::B, stage_[leg], mb));
    if (split) weights_.push_back(Action::make(ActionKind::W, stage_[leg], mb));
  }
  void weight() {
    actions_.push_back(weights_.front());
    weights_.pop_front();
  }
  void overlap(int forward_leg, int backward_leg) {
    const int f_mb = next_forward(forward_leg);
    actions_.push_back(Action::overlap(stage_[forward_leg], f_mb, stage_[backward_leg], next_backward(backward_leg)));
  }

 private:
  int next_forward(int leg) { return first_microbatch_[leg] + forwards_[leg]++; }
  int next_backward(int leg) { return first_microbatch_[leg] + backwards_[leg]++; }

  std::vector<Action>& actions_;
  std::array<int, 2> stage_, first_microbatch_;
  std::array<int, 2> forwards_{0, 0}, backwards_{0, 0};
  std::deque<Action> weights_;
};

// The eight phases for rank r of n with k micro-batches per leg (k >= 2n).
void run_phases(PhaseProgram& program, int n, int r, int k) {
  for (int i = 0; i < 2 * (n - r - 1); ++i) program.forward(0);
  for (int i = 0; i < r + 1; ++i) {
    program.forward(0);
    program.forward(1);
  }
  for (int i = 0; i < n - r - 1; ++i) {
    program.backward(1, true);
    program.weight();
    program.forward(1);
  }
  for (int i = 0; i < k - 2 * n + r + 1; ++i) {
    if (i == 0 && r == n - 1) {
      program.forward(0);
      program.backward(1);
    } else {
      program.overlap(0, 1);
    }
    program.overlap(1, 0);
  }
  for (int i = 0; i < n - r - 1; ++i) {
    program.backward(1);
    program.overlap(1, 0);
  }
  // Phase 6: the backwards from the middle pair on are split, so that their W's can fill phases 7-8.
  bool split = false;
  for (int i = 0; i < r + 1; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) split = true;
    program.backward(1, split);
    if (i == (r + 1) / 2 && r % 2 == 0) split = true;
    program.backward(0, split);
  }
  for (int i = 0; i < n - r - 1; ++i) {
    program.weight();
    program.backward(0, true);
  }
  for (int i = 0; i < r + 1; ++i) program.weight();
}

Schedule build_v(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches;
  Schedule schedule = make_schedule("dualpipev", p, m, v_placement(p, 2 * p));
  for (int r = 0; r < p; ++r) {
    PhaseProgram program(schedule.device_actions[r], {r, 2 * p - 1 - r}, {0, 0});
    run_phases(program, p, r, m);
  }
  return schedule;
}

Schedule build_bidirectional(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches, half = m / 2;
  Schedule schedule = make_schedule("dualpipe", p, m, bidirectional_placement(p), 2);
  schedule.microbatch_pipeline.assign(m, 0);
  std::fill(schedule.microbatch_pipeline.begin() + half, schedule.microbatch_pipeline.end(), 1);
  for (int d = 0; d < p; ++d) {
    const int downstream = d, upstream = p + (p - 1 - d);  // pipeline 0 stage d, pipeline 1 chunk p-1-d
    const bool second_half = d >= p / 2;
    const std::array<int, 2> stage = second_half ? std::array{upstream, downstream} : std::array{downstream, upstream};
    const std::array<int, 2> first = second_half ? std::array{half, 0} : std::array{0, half};
    PhaseProgram program(schedule.device_actions[d], stage, first);
    run_phases(program, p / 2, std::min(d, p - 1 - d), half);
  }
  return schedule;
}

}  // namespace

Schedule generate_dualpipev(const ScheduleParams& params) { return build_v(params); }
Schedule generate_dualpipe(const ScheduleParams& params) { return build_bidirectional(params); }

}  // namespace flexpipe::schedules
