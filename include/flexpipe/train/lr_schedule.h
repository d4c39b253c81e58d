// The learning rate of a training step: linear warm-up to the peak, then cosine decay to a floor
// (GPT-3, Megatron-LM, nanoGPT). Torch-free, so the single-process reference and every rank compute
// the same value.
#pragma once
#include <string>

namespace flexpipe {

struct LrSchedule {
  double peak = 3e-3;
  int warmup_steps = 0;    // steps 0 .. warmup-1 ramp linearly up to the peak
  int decay_steps = 0;     // cosine decay over the steps after warm-up; 0: constant after warm-up
  double min_ratio = 0.1;  // the floor, as a fraction of the peak
};

// lr(t) = peak * (t + 1) / warmup                                   for t < warmup
//       = floor + (peak - floor) * (1 + cos(pi * min(1, (t - warmup) / decay))) / 2   after it
// with floor = peak * min_ratio (constant peak when decay_steps is 0).
double learning_rate(const LrSchedule& schedule, int step);

// Throws Error naming the field when a value is out of range.
void check_lr_schedule(const LrSchedule& schedule);

}  // namespace flexpipe
