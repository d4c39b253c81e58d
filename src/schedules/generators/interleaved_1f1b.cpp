// Interleaved 1F1B (Narayanan et al. 2021), in the order of Megatron-LM's get_schedule_table with
// microbatch_group_size_per_vp_stage = p (and of PyTorch ScheduleInterleaved1F1B when p divides m).
// Device r holds v chunks, stages c*p + r. Its forwards walk the table group by group: p
// micro-batches through chunk 0, the same p through chunk 1, ..., then the next p micro-batches;
// its backwards walk the same table with the chunks reversed. It runs (p-r-1)*2 + (v-1)*p warm-up
// forwards (capped at m*v), then one forward and one backward in turn, then the remaining backwards.
// m is a multiple of p (interleaved-1f1b.fps's condition): Megatron needs p <= group size <= m and
// m % group either 0 or >= p; with groups of p that is m a multiple of p, which is also where
// PyTorch's rounds coincide with Megatron's groups.
#include <algorithm>
#include <string>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

struct TableEntry {
  int chunk;
  int microbatch;
};

// Entry k of Megatron's schedule table when p divides m.
TableEntry table_entry(int k, int p, int v) {
  const int group = k / (p * v), within = k % (p * v);
  return {within / p, group * p + within % p};
}

Schedule build(const ScheduleParams& params) {
  const int p = params.devices, m = params.microbatches, v = params.chunks;
  Schedule schedule = make_schedule("interleaved-1f1b", p, m, loop_placement(p, p * v));
  const int total = m * v;
  for (int device = 0; device < p; ++device) {
    std::vector<Action>& actions = schedule.device_actions[device];
    actions.reserve(2 * total);
    auto forward = [&](int k) {
      const TableEntry e = table_entry(k, p, v);
      actions.push_back(Action::make(ActionKind::F, e.chunk * p + device, e.microbatch));
    };
    auto backward = [&](int k) {
      const TableEntry e = table_entry(k, p, v);
      actions.push_back(Action::make(ActionKind::B, (v - 1 - e.chunk) * p + device, e.microbatch));
    };
    const int warmup = std::min(total, (p - device - 1) * 2 + (v - 1) * p);
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = 0; k < total - warmup; ++k) {
      forward(warmup + k);
      backward(k);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return schedule;
}

}  // namespace

Schedule generate_interleaved_1f1b(const ScheduleParams& params) { return build(params); }

}  // namespace flexpipe::schedules
