// The learning rate of a step: linear warm-up, cosine decay to a floor.
#include "flexpipe/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

double learning_rate(const LrSchedule& s, int step) {
  if (step < s.warmup_steps) return s.peak * double(step + 1) / double(s.warmup_steps);
  if (s.decay_steps <= 0) return s.peak;
  const double progress = std::min(1.0, double(step - s.warmup_steps) / double(s.decay_steps));
  const double floor = s.peak * s.min_ratio;
  return floor + (s.peak - floor) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

void check_lr_schedule(const LrSchedule& s) {
  if (!(s.peak >= 0)) throw Error(fmt::format("learning rate {} must be non-negative", s.peak));
  if (s.warmup_steps < 0) throw Error(fmt::format("warm-up steps {} must be non-negative", s.warmup_steps));
  if (s.decay_steps < 0) throw Error(fmt::format("decay steps {} must be non-negative", s.decay_steps));
  if (!(s.min_ratio >= 0 && s.min_ratio <= 1))
    throw Error(fmt::format("minimum learning-rate ratio {} must be within [0, 1]", s.min_ratio));
}

}  // namespace flexpipe
