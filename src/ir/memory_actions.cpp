// Inserting R, OFFLOAD and RELOAD for flagged stages (include/flexpipe/ir/memory_actions.h).
//
// Two passes per device list: the first inserts R before each flagged backward and OFFLOAD after
// each flagged forward; the second, on that list (so an inserted R counts as the compute action it
// is), places each RELOAD one compute action ahead of its R or backward (right before it on the
// stages that reload late). When that compute action is a backward with its R right before it, the
// RELOAD goes before the R, so that every R stays right before its backward.
#include "flexpipe/ir/memory_actions.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

// Positions of what a (stage, micro-batch) has in one device's list; -1 where absent.
struct Positions {
  int forward = -1;
  int backward = -1;
  int recompute = -1;
  int offload = -1;
};

class Inserter {
 public:
  Inserter(const Schedule& schedule, const std::vector<char>& recompute, const std::vector<char>& offload,
           const std::vector<char>& reload_late)
      : schedule_(schedule), recompute_(recompute), offload_(offload), reload_late_(reload_late) {}

  std::vector<Action> run(int device) {
    device_ = device;
    std::vector<Action> list = insert_recompute_and_offload(schedule_.device_actions[device]);
    return insert_reloads(list);
  }

 private:
  size_t key(int stage, int microbatch) const {
    return static_cast<size_t>(stage) * schedule_.num_microbatches + microbatch;
  }

  void check_action(const Action& a, int stage, int microbatch, int position) const {
    if (stage < 0 || stage >= schedule_.num_stages() || microbatch < 0 || microbatch >= schedule_.num_microbatches)
      throw Error(fmt::format("add_memory_actions: device {} #{} {}: no such stage or micro-batch", device_, position,
                              schedule_.action_name(a)));
  }

  // Where each (stage, micro-batch) has its forward, backward, R and OFFLOAD in `list`.
  std::vector<Positions> find(const std::vector<Action>& list) const {
    std::vector<Positions> found(static_cast<size_t>(schedule_.num_stages()) * schedule_.num_microbatches);
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      auto at = [&](int stage, int microbatch) -> Positions& {
        check_action(a, stage, microbatch, i);
        return found[key(stage, microbatch)];
      };
      switch (a.kind) {
        case ActionKind::F: at(a.stage, a.microbatch).forward = i; break;
        case ActionKind::B:
        case ActionKind::I: at(a.stage, a.microbatch).backward = i; break;
        case ActionKind::Overlap:
          at(a.stage, a.microbatch).forward = i;
          at(a.stage2, a.microbatch2).backward = i;
          break;
        case ActionKind::R: at(a.stage, a.microbatch).recompute = i; break;
        case ActionKind::Offload: at(a.stage, a.microbatch).offload = i; break;
        default: break;
      }
    }
    return found;
  }

  // Every flagged (stage, micro-batch) must have both its forward and its backward here.
  void require_pairs(const std::vector<Positions>& found) const {
    for (int stage = 0; stage < schedule_.num_stages(); ++stage) {
      if (!recompute_[stage] && !offload_[stage]) continue;
      for (int microbatch = 0; microbatch < schedule_.num_microbatches; ++microbatch) {
        const Positions& p = found[key(stage, microbatch)];
        if ((p.forward >= 0) == (p.backward >= 0)) continue;
        throw Error(fmt::format("add_memory_actions: device {}: stage {} micro-batch {} has a {} but no {}", device_,
                                stage, microbatch, p.forward >= 0 ? "forward" : "backward",
                                p.forward >= 0 ? "backward" : "forward"));
      }
    }
  }

  bool wants_recompute(const Positions& p, int stage) const { return recompute_[stage] && p.recompute < 0; }
  bool wants_offload(const Positions& p, int stage) const { return offload_[stage] && p.offload < 0; }

  std::vector<Action> insert_recompute_and_offload(const std::vector<Action>& list) {
    const std::vector<Positions> found = find(list);
    require_pairs(found);
    std::vector<Action> out;
    out.reserve(list.size() * 2);
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      const Action& a = list[i];
      const bool forward = a.kind == ActionKind::F || a.kind == ActionKind::Overlap;
      const bool backward = is_backward(a.kind) || a.kind == ActionKind::Overlap;
      if (backward) {
        const Action half = a.kind == ActionKind::Overlap ? a.backward_half() : a;
        const Positions& p = found[key(half.stage, half.microbatch)];
        if (wants_recompute(p, half.stage)) out.push_back(Action::make(ActionKind::R, half.stage, half.microbatch));
      }
      out.push_back(a);
      if (forward) {
        const Positions& p = found[key(a.stage, a.microbatch)];
        if (wants_offload(p, a.stage)) {
          out.push_back(Action::make(ActionKind::Offload, a.stage, a.microbatch));
          offloaded_.emplace_back(a.stage, a.microbatch);
        }
      }
    }
    return out;
  }

  bool computes(const Action& a) const {
    if (a.kind == ActionKind::Custom) return !schedule_.custom_ops[a.custom].communicates;
    return is_compute(a.kind);
  }

  // Whether `r` is the R of the backward (or the backward half) that `a` runs.
  static bool recomputes_before(const Action& r, const Action& a) {
    if (r.kind != ActionKind::R) return false;
    if (a.kind == ActionKind::Overlap) return r.stage == a.stage2 && r.microbatch == a.microbatch2;
    return is_backward(a.kind) && r.stage == a.stage && r.microbatch == a.microbatch;
  }

  std::vector<Action> insert_reloads(const std::vector<Action>& list) {
    if (offloaded_.empty()) return list;
    const std::vector<Positions> found = find(list);
    struct Placed {
      int before;  // inserted right before this position
      int serves;  // position of the R or backward it is for
      Action reload;
    };
    std::vector<Placed> reloads;
    for (const auto& [stage, microbatch] : offloaded_) {
      const Positions& p = found[key(stage, microbatch)];
      const int anchor = p.recompute >= 0 ? p.recompute : p.backward;
      int before = anchor;
      const bool late = !reload_late_.empty() && reload_late_[stage];
      for (int j = anchor - 1; !late && j > p.offload; --j)
        if (computes(list[j])) {
          // An R stays right before its backward: a RELOAD for that backward's slot goes before both.
          before = j > p.offload + 1 && recomputes_before(list[j - 1], list[j]) ? j - 1 : j;
          break;
        }
      reloads.push_back({before, anchor, Action::make(ActionKind::Reload, stage, microbatch)});
    }
    offloaded_.clear();
    // RELOADs that go before one action come in the order of what they serve.
    std::sort(reloads.begin(), reloads.end(), [](const Placed& a, const Placed& b) {
      return std::tie(a.before, a.serves) < std::tie(b.before, b.serves);
    });
    std::vector<Action> out;
    out.reserve(list.size() + reloads.size());
    size_t next = 0;
    for (int i = 0; i < static_cast<int>(list.size()); ++i) {
      for (; next < reloads.size() && reloads[next].before == i; ++next) out.push_back(reloads[next].reload);
      out.push_back(list[i]);
    }
    return out;
  }

  const Schedule& schedule_;
  const std::vector<char>& recompute_;
  const std::vector<char>& offload_;
  const std::vector<char>& reload_late_;
  int device_ = 0;
  std::vector<std::pair<int, int>> offloaded_;  // (stage, micro-batch) given an OFFLOAD on this device
};

}  // namespace

Schedule add_memory_actions(const Schedule& schedule, const std::vector<char>& recompute_stage,
                            const std::vector<char>& offload_stage, const std::vector<char>& reload_before_recompute) {
  const int stages = schedule.num_stages();
  for (const auto& [flags, what] : {std::pair{&recompute_stage, "recompute"}, std::pair{&offload_stage, "offload"},
                                    std::pair{&reload_before_recompute, "reload-before-recompute"}})
    if (static_cast<int>(flags->size()) != stages && !(flags == &reload_before_recompute && flags->empty()))
      throw Error(fmt::format("add_memory_actions: {} {} flags for the {} stages of schedule {} (one per global stage)",
                              flags->size(), what, stages, schedule.name));
  if (static_cast<int>(schedule.device_actions.size()) != schedule.num_devices)
    throw Error(fmt::format("add_memory_actions: schedule {} has {} action lists for {} devices", schedule.name,
                            schedule.device_actions.size(), schedule.num_devices));
  Schedule result = schedule;
  Inserter inserter(schedule, recompute_stage, offload_stage, reload_before_recompute);
  for (int d = 0; d < schedule.num_devices; ++d) result.device_actions[d] = inserter.run(d);
  return result;
}

}  // namespace flexpipe
