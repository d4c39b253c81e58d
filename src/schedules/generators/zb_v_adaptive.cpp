// ZB-V as its authors build it (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, section
// 6; the V schedule of sail-sg/zero-bubble-pipeline-parallelism): not a fixed phase program like
// `zb-v` (PyTorch's order) but a construction that places every pass in simulated time, given the
// costs of F, I and W, the communication latency and a memory limit, and so adapts to m and to
// the limit. 2p stages in a V: device d holds stage d (leg 0, forward flowing 0 -> p-1) and stage
// 2p-1-d (leg 1, forward flowing back p-1 -> 0); a micro-batch's passes on a device run F leg 0,
// F leg 1, I leg 1, I leg 0, then the W's.
//
// One attempt, each pass placed at the end of its device's list as soon as its device is free and
// its input has arrived:
//  1. Warm-up. Every device runs one leg-0 F; then from device p-1 down, device d runs more leg-0
//     F's (on devices 0..d together) while they end before the leg-1 F of micro-batch 0 reaches it,
//     memory leaves room for 2d+2 more activations and it has run fewer than m-d, then that leg-1 F.
//  2. Fill. From device 1 up, devices d..p-1 run F's, alternating the legs, until device d has run
//     as many F's as device d-1 and more leg-1 F's (or d-1 has run all of them).
//  3. Steady state, 2m rounds. Each round every device runs one I (leg 0 once its input has arrived
//     from device d+1, or when leg 1 is done; otherwise leg 1), devices with a leg-0 I first from p-1
//     down, then the others from 0 up; then every device runs one F (leg 1 when its input has
//     arrived, otherwise leg 0 when it has). Before each pass, pending W's (oldest first) fill the
//     wait for its input while they end before it arrives, and one more W runs when the wait would
//     make this device's idle time exceed the largest idle time of any device so far (for a leg-1 I
//     or an F only in the variants that allow it). W's also run first whenever the memory limit
//     would be exceeded.
//  4. The remaining W's.
// Four variants (filling before leg-1 I's or not, before F's or not) are each refined: an attempt
// is repeated with the previous attempt's per-device idle times as allowances (a device that idled
// less than the worst may idle up to the difference) while the worst idle time strictly shrinks.
// The schedule kept is the one with the smallest worst idle time, idle counted from a device's
// first pass.
//
// The published construction needs m >= p (its warm-up and fill assume it); for m < p it is run
// for p micro-batches and the extra ones are dropped, which keeps the order valid since dependencies
// never cross micro-batches. With F = I = W = t, free communication and m >= p the worst idle time
// is 0 and the makespan (6m + p - 1) t, the least any V schedule can take: device p-1 starts at
// (p-1) t and has 6m t of work. PyTorch's `zb-v` reaches that only from m = 2p-1 (p = 8, m = 8: 55
// against 62 chunk units). The library's program (examples/schedules/zb-v-adaptive.fps) runs the
// same construction with its inputs as parameters; this generator is its test oracle.
#include <algorithm>
#include <array>
#include <deque>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "generators.h"

namespace flexpipe::schedules {
namespace {

enum Pass { kForward = 0, kInput = 1, kWeight = 2 };

struct Placed {
  Pass pass;
  int leg;
  int microbatch;
};

struct Attempt {
  std::vector<std::vector<Placed>> lists;  // per device, in order
  std::vector<double> idle;                // per device, from its first pass
  double worst_idle = 0;
};

class Construction {
 public:
  Construction(int p, int m, const VConstructionInputs& in, bool fill_forward, bool fill_input,
               const std::vector<double>* allowance)
      : p_(p),
        m_(m),
        in_(in),
        limit_(in.memory_limit > 0 ? in.memory_limit : 2.0 * p * in.forward_memory),
        fill_forward_(fill_forward),
        fill_input_(fill_input),
        allowance_(allowance),
        now_(p, 0),
        memory_(p, 0),
        idle_(p, 0),
        forwards_(p, {0, 0}),
        inputs_(p, {0, 0}),
        pending_(p),
        lists_(p) {
    for (auto& pass : end_)
      for (auto& leg : pass) leg.assign(static_cast<size_t>(p) * m, -1);
    if (allowance_ != nullptr)
      for (double a : *allowance_) largest_allowance_ = std::max(largest_allowance_, a);
  }

  Attempt run() {
    warm_up();
    fill();
    for (int round = 0; round < 2 * m_; ++round) {
      steady_inputs();
      steady_forwards();
    }
    for (int d = 0; d < p_; ++d)
      while (!pending_[d].empty()) weight(d);
    for (int d = 0; d < p_; ++d)
      if (forwards_[d][0] + forwards_[d][1] + inputs_[d][0] + inputs_[d][1] != 4 * m_)
        throw std::logic_error(fmt::format("zb-v-adaptive: device {} left passes unplaced (p={}, m={})", d, p_, m_));
    Attempt attempt{std::move(lists_), idle_, 0};
    for (double idle : attempt.idle) attempt.worst_idle = std::max(attempt.worst_idle, idle);
    return attempt;
  }

 private:
  double cost(Pass pass) const { return pass == kForward ? in_.forward : pass == kInput ? in_.input : in_.weight; }
  double memory(Pass pass) const {
    return pass == kForward ? in_.forward_memory : pass == kInput ? in_.input_memory : in_.weight_memory;
  }
  double& end(Pass pass, int leg, int d, int mb) { return end_[pass][leg][static_cast<size_t>(d) * m_ + mb]; }
  int& count(Pass pass, int d, int leg) { return pass == kForward ? forwards_[d][leg] : inputs_[d][leg]; }

  // The device that sends pass (F or I) of `leg` its input, or -1 when it comes from this device.
  int sender(Pass pass, int leg, int d) const {
    const bool from_below = (pass == kForward) == (leg == 0);  // F leg 0 and I leg 1 flow 0 -> p-1
    if (from_below) return d > 0 ? d - 1 : -1;
    return d < p_ - 1 ? d + 1 : -1;
  }

  // When the input of the next pass (F or I) of `leg` on device d arrives: -1 when not yet sent,
  // and no value (has_sender false) when it comes from this device.
  double arrival(Pass pass, int leg, int d, bool& has_sender) {
    const int from = sender(pass, leg, d);
    has_sender = from >= 0;
    if (!has_sender) return -1;
    const double sent = end(pass, leg, from, count(pass, d, leg));
    return sent < 0 ? -1 : sent + in_.comm;
  }
  bool arrived(Pass pass, int leg, int d) {
    bool has_sender = false;
    return arrival(pass, leg, d, has_sender) >= 0;
  }

  double worst_idle_for(int d) const {
    double worst = 0;
    for (double idle : idle_) worst = std::max(worst, idle);
    if (allowance_ != nullptr) worst = std::max(worst, largest_allowance_ - (*allowance_)[d]);
    return worst;
  }

  void place(Pass pass, int leg, int d) {
    const int mb = count(pass, d, leg);
    if (mb >= m_) throw std::logic_error("zb-v-adaptive: a pass beyond the last micro-batch");
    const double ready = now_[d] + cost(pass);
    double finish = ready;
    bool has_sender = false;
    const double input = arrival(pass, leg, d, has_sender);
    if (has_sender) {
      if (input < 0) throw std::logic_error("zb-v-adaptive: a pass placed before its input was sent");
      finish = std::max(finish, input + cost(pass));
    }
    if (memory_[d] + memory(pass) > limit_) throw std::logic_error("zb-v-adaptive: a pass beyond the memory limit");
    if (forwards_[d][0] > 0) idle_[d] += finish - ready;
    end(pass, leg, d, mb) = finish;
    now_[d] = finish;
    memory_[d] += memory(pass);
    lists_[d].push_back({pass, leg, mb});
    if (pass == kInput) pending_[d].push_back({leg, mb});
    ++count(pass, d, leg);
  }

  void weight(int d) {
    const auto [leg, mb] = pending_[d].front();
    pending_[d].pop_front();
    now_[d] += in_.weight;
    memory_[d] += in_.weight_memory;
    lists_[d].push_back({kWeight, leg, mb});
  }

  void make_room(int d, Pass pass) {
    while (memory_[d] + memory(pass) > limit_) {
      if (pending_[d].empty()) throw std::logic_error("zb-v-adaptive: the memory limit leaves no room");
      weight(d);
    }
  }

  // Pending W's fill the wait for the next pass's input; one more when the wait would exceed the
  // idle time any device has had so far.
  void fill_wait(Pass pass, int leg, int d, bool allowed) {
    bool has_sender = false;
    const double input = arrival(pass, leg, d, has_sender);
    if (!has_sender) return;
    while (!pending_[d].empty() && input >= now_[d] + in_.weight) weight(d);
    if (allowed && !pending_[d].empty() && input - now_[d] > worst_idle_for(d) - idle_[d]) weight(d);
  }

  void warm_up() {
    for (int d = 0; d < p_; ++d) place(kForward, 0, d);
    for (int d = p_ - 1; d >= 0; --d) {
      if (d < p_ - 1) {
        const double turn = end(kForward, 1, d + 1, 0) + in_.comm;
        while (memory_[d] + in_.forward_memory * (2 + 2 * d) <= limit_ && now_[d] + in_.forward <= turn &&
               forwards_[d][0] < m_ - d)
          for (int j = 0; j <= d; ++j) place(kForward, 0, j);
      }
      place(kForward, 1, d);
    }
  }

  void fill() {
    int leg = 0;
    for (int d = 1; d < p_; ++d) {
      auto behind = [&] {
        const auto& mine = forwards_[d];
        const auto& below = forwards_[d - 1];
        return mine[0] + mine[1] < below[0] + below[1] || (mine[1] <= below[1] && below[1] < m_);
      };
      while (behind()) {
        for (int j = p_ - 1; j >= d; --j)
          if (forwards_[j][leg] < m_) place(kForward, leg, j);
        leg = 1 - leg;
      }
    }
  }

  void steady_inputs() {
    for (int d = 0; d < p_; ++d) make_room(d, kInput);
    std::vector<int> leg0, leg1;
    for (int d = 0; d < p_; ++d) {
      if (inputs_[d][0] >= inputs_[d][1])
        leg1.push_back(d);
      else if (d == p_ - 1 || arrived(kInput, 0, d) || inputs_[d][1] >= m_)
        leg0.push_back(d);
      else
        leg1.push_back(d);
    }
    std::vector<std::pair<int, int>> order;  // (device, leg)
    for (auto d = leg0.rbegin(); d != leg0.rend(); ++d) order.emplace_back(*d, 0);
    for (int d : leg1) order.emplace_back(d, 1);
    for (const auto& [d, leg] : order) {
      fill_wait(kInput, leg, d, leg == 0 || fill_input_);
      place(kInput, leg, d);
    }
  }

  void steady_forwards() {
    for (int d = 0; d < p_; ++d) {
      if (forwards_[d][1] >= m_) continue;
      int leg = -1;
      if (forwards_[d][1] >= forwards_[d][0])
        leg = 0;
      else if (d == p_ - 1 || arrived(kForward, 1, d))
        leg = 1;
      else if (forwards_[d][0] < m_ && (d == 0 || arrived(kForward, 0, d)))
        leg = 0;
      if (leg < 0) continue;
      make_room(d, kForward);
      fill_wait(kForward, leg, d, fill_forward_);
      place(kForward, leg, d);
    }
  }

  const int p_, m_;
  const VConstructionInputs in_;
  const double limit_;
  const bool fill_forward_, fill_input_;
  const std::vector<double>* allowance_;
  double largest_allowance_ = 0;
  std::vector<double> now_, memory_, idle_;
  std::vector<std::array<int, 2>> forwards_, inputs_;     // per device and leg: passes placed
  std::vector<std::deque<std::pair<int, int>>> pending_;  // per device: (leg, micro-batch) of I's without W
  std::vector<std::vector<Placed>> lists_;
  std::array<std::array<std::vector<double>, 2>, 2> end_;  // [F or I][leg][device * m + mb]: end, -1 if not placed
};

// One variant, refined while its worst idle time strictly shrinks.
Attempt refined(int p, int m, const VConstructionInputs& in, bool fill_forward, bool fill_input) {
  Attempt kept = Construction(p, m, in, fill_forward, fill_input, nullptr).run();
  for (;;) {
    Attempt next = Construction(p, m, in, fill_forward, fill_input, &kept.idle).run();
    if (!(next.worst_idle < kept.worst_idle)) return kept;
    kept = std::move(next);
  }
}

Schedule build(const ScheduleParams& params) { return zb_v_adaptive(params.devices, params.microbatches, {}); }

}  // namespace

Schedule generate_zb_v_adaptive(const ScheduleParams& params) { return build(params); }

Schedule zb_v_adaptive(int p, int m, const VConstructionInputs& inputs) {
  const int n = std::max(m, p);
  Attempt best;
  bool found = false;
  for (bool fill_input : {true, false})
    for (bool fill_forward : {true, false}) {
      Attempt attempt = refined(p, n, inputs, fill_forward, fill_input);
      if (!found || attempt.worst_idle < best.worst_idle) best = std::move(attempt);
      found = true;
    }
  Schedule schedule = make_schedule("zb-v-adaptive", p, m, v_placement(p, 2 * p));
  for (int d = 0; d < p; ++d) {
    std::vector<Action>& actions = schedule.device_actions[d];
    actions.reserve(6 * m);
    for (const Placed& placed : best.lists[d]) {
      if (placed.microbatch >= m) continue;
      const int stage = placed.leg == 0 ? d : 2 * p - 1 - d;
      const ActionKind kind = placed.pass == kForward ? ActionKind::F
                              : placed.pass == kInput ? ActionKind::I
                                                      : ActionKind::W;
      actions.push_back(Action::make(kind, stage, placed.microbatch));
    }
  }
  return schedule;
}

}  // namespace flexpipe::schedules
