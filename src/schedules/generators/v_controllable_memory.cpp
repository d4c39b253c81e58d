// V-Half and V-Min (Qi et al., "Pipeline Parallelism with Controllable Memory", NeurIPS 2024; the
// building blocks of sail-sg zerobubble/scheduler/zbv_greedy.py). 2p stages in a V: device d holds
// stage d (first leg) and stage 2p-1-d (second leg), backward split into I and W.
//
// 1. Building block. One micro-batch's four critical passes on device d sit at fixed slots of a
//    unit-time grid (first-leg F, second-leg F, second-leg I, first-leg I); micro-batch k repeats
//    the block 6k slots later. Each W takes the first free slot after its I (oldest W first). The
//    slots are chosen so that the lifespan of a micro-batch's activations on a device, and hence the
//    peak, is 2 * ((p+2)/2) chunk activations for V-Half and 2 * ((p+4)/3) for V-Min: (p+2)/2 and
//    (p+4)/3 micro-batches of a full stage, against p for 1F1B. The slot grid is a valid order
//    already, but it idles through warm-up and cool-down.
// 2. Greedy list scheduling in unit time, with the grid as priority and the grid's peak as in-flight
//    limit. At each step an idle device runs the first action of its remaining grid order that is
//    ready and that keeps the rest of that order within the limit when run now (an F may jump ahead
//    only if the memory it adds stays under the limit up to its grid position). After a device's
//    last F, its W's yield to any ready I: they then fill the wait for the backward chain, and with
//    no F left they cannot raise the peak.
// The action with the smallest grid slot among all devices' next actions is always ready and within
// the limit, so the greedy never stalls. With F = I = W the bubble is about 1/2 (V-Half) and 2/3
// (V-Min) of 1F1B's at equal model size.
#include <algorithm>
#include <array>
#include <deque>
#include <string>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "generators.h"

namespace flexpipe::schedules {
namespace {

enum class VMemory { Half, Min };

constexpr int kBlockPeriod = 6;  // F, F, I, I, W, W of one micro-batch on one device

// Grid slots of micro-batch 0's passes on device d: first-leg F, second-leg F, second-leg I,
// first-leg I. The shift keeps the four passes on distinct slots modulo the period.
std::array<int, 4> block_slots(VMemory memory, int p, int d) {
  if (memory == VMemory::Half) {
    const int shift = p % 2 == 0 ? 3 : 0;
    return {2 * d, 3 * p - d - 2, 3 * p + shift + 2 * d - 1, 6 * p + shift - d - 2};
  }
  const int shift = p % 3 == 0 ? 2 : 0;
  return {d, 2 * p - d - 1, 2 * p + shift + d, 4 * p + shift - d - 1};
}

// Device d's actions in grid order.
std::vector<Action> grid_order(VMemory memory, int p, int m, int d) {
  const std::array<int, 4> slots = block_slots(memory, p, d);
  const int first_leg = d, second_leg = 2 * p - 1 - d;
  const std::array<Action, 4> passes = {Action::make(ActionKind::F, first_leg), Action::make(ActionKind::F, second_leg),
                                        Action::make(ActionKind::I, second_leg),
                                        Action::make(ActionKind::I, first_leg)};
  std::vector<Action> order;
  order.reserve(6 * m);
  std::deque<Action> weights;
  const int last_slot = *std::max_element(slots.begin(), slots.end()) + kBlockPeriod * (m - 1);
  for (int slot = 0; slot <= last_slot; ++slot) {
    bool occupied = false;
    for (int q = 0; q < 4; ++q) {
      const int offset = slot - slots[q];
      if (offset < 0 || offset % kBlockPeriod != 0 || offset / kBlockPeriod >= m) continue;
      Action pass = passes[q];
      pass.microbatch = offset / kBlockPeriod;
      order.push_back(pass);
      if (pass.kind == ActionKind::I) weights.push_back(Action::make(ActionKind::W, pass.stage, pass.microbatch));
      occupied = true;
    }
    if (!occupied && !weights.empty()) {
      order.push_back(weights.front());
      weights.pop_front();
    }
  }
  order.insert(order.end(), weights.begin(), weights.end());
  return order;
}

int activation_delta(const Action& a) {
  if (a.kind == ActionKind::F) return 1;
  if (a.kind == ActionKind::W) return -1;
  return 0;
}

int peak_in_flight(const std::vector<Action>& order) {
  int level = 0, peak = 0;
  for (const Action& a : order) peak = std::max(peak, level += activation_delta(a));
  return peak;
}

class GreedyVScheduler {
 public:
  GreedyVScheduler(int p, int m) : p_(p), m_(m), forward_end_(2 * p * m, -1), input_end_(2 * p * m, -1) {}

  // Runs the unit-time list scheduling over each device's grid order; returns the executed orders.
  std::vector<std::vector<Action>> run(const std::vector<std::vector<Action>>& grid, int limit) {
    std::vector<std::vector<Action>> executed(p_);
    std::vector<DeviceState> devices(p_);
    size_t left = 0;
    for (int d = 0; d < p_; ++d) {
      devices[d].taken.assign(grid[d].size(), false);
      devices[d].forwards_left = 2 * m_;
      left += grid[d].size();
    }
    for (int now = 0; left > 0; ++now) {
      bool progressed = false;
      for (int d = 0; d < p_; ++d) {
        DeviceState& device = devices[d];
        const int pick = choose(grid[d], device, limit, now);
        if (pick < 0) continue;
        const Action& a = grid[d][pick];
        device.taken[pick] = true;
        while (device.head < device.taken.size() && device.taken[device.head]) ++device.head;
        device.in_flight += activation_delta(a);
        if (a.kind == ActionKind::F) {
          --device.forwards_left;
          forward_end_[index(a)] = now + 1;
        }
        if (a.kind == ActionKind::I) input_end_[index(a)] = now + 1;
        executed[d].push_back(a);
        --left;
        progressed = true;
      }
      // Unit time: what ran this step ends at now + 1, so a step without any start repeats forever.
      if (!progressed)
        throw Error(fmt::format("internal error: V schedule generator stalled at step {} (p={}, m={})", now, p_, m_));
    }
    return executed;
  }

 private:
  struct DeviceState {
    std::vector<bool> taken;  // per grid position: already run
    size_t head = 0;          // first grid position not yet run
    int in_flight = 0;        // chunk activations held now
    int forwards_left = 0;
  };

  int index(const Action& a) const { return a.stage * m_ + a.microbatch; }
  bool done(const std::vector<int>& end, int stage, int mb, int now) const {
    const int t = end[stage * m_ + mb];
    return t >= 0 && t <= now;
  }
  bool ready(const Action& a, int now) const {
    switch (a.kind) {
      case ActionKind::F: return a.stage == 0 || done(forward_end_, a.stage - 1, a.microbatch, now);
      case ActionKind::I:
        return done(forward_end_, a.stage, a.microbatch, now) &&
               (a.stage == 2 * p_ - 1 || done(input_end_, a.stage + 1, a.microbatch, now));
      default: return done(input_end_, a.stage, a.microbatch, now);
    }
  }

  // The grid position to run now, or -1. `peak_before` is the highest activation level the rest of
  // the grid order reaches before position j: running an F from j first raises each of those
  // levels by one. After the last F, W's yield to a ready I.
  int choose(const std::vector<Action>& order, const DeviceState& device, int limit, int now) const {
    const bool weights_yield = device.forwards_left == 0;
    int level = device.in_flight, peak_before = device.in_flight, first_weight = -1;
    for (size_t j = device.head; j < order.size(); ++j) {
      if (device.taken[j]) continue;
      const Action& a = order[j];
      if (ready(a, now) && (a.kind != ActionKind::F || peak_before + 1 <= limit)) {
        if (!(weights_yield && a.kind == ActionKind::W)) return static_cast<int>(j);
        if (first_weight < 0) first_weight = static_cast<int>(j);
      }
      level += activation_delta(a);
      peak_before = std::max(peak_before, level);
    }
    return first_weight;
  }

  int p_, m_;
  std::vector<int> forward_end_, input_end_;  // per (stage, micro-batch): step at which it ended, -1 before
};

Schedule build(const ScheduleParams& params, VMemory memory, const char* name) {
  const int p = params.devices, m = params.microbatches;
  std::vector<std::vector<Action>> grid(p);
  int limit = 0;
  for (int d = 0; d < p; ++d) {
    grid[d] = grid_order(memory, p, m, d);
    limit = std::max(limit, peak_in_flight(grid[d]));
  }
  Schedule schedule = make_schedule(name, p, m, v_placement(p, 2 * p));
  schedule.device_actions = GreedyVScheduler(p, m).run(grid, limit);
  return schedule;
}

Schedule build_half(const ScheduleParams& params) { return build(params, VMemory::Half, "v-half"); }
Schedule build_min(const ScheduleParams& params) { return build(params, VMemory::Min, "v-min"); }

}  // namespace

Schedule generate_v_half(const ScheduleParams& params) { return build_half(params); }
Schedule generate_v_min(const ScheduleParams& params) { return build_min(params); }

}  // namespace flexpipe::schedules
