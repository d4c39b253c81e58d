// Lowering: a SEND after each producer whose output crosses devices, a RECV before each consumer.
#include "flexpipe/ir/lowering.h"

namespace flexpipe {

namespace {

// The receives an action needs before it can run, and the sends it makes right after, for one
// compute action (an Overlap contributes both halves).
struct Lowerer {
  const Schedule& schedule;
  std::vector<Action>* out = nullptr;
  int device = 0;

  bool remote(int stage) const { return stage >= 0 && schedule.stage_device[stage] != device; }

  void receives_for(const Action& a) {
    if (a.kind == ActionKind::F) {
      if (remote(schedule.prev_stage(a.stage))) out->push_back(Action::make(ActionKind::RecvF, a.stage, a.microbatch));
    } else if (is_backward(a.kind)) {
      if (remote(schedule.next_stage(a.stage))) out->push_back(Action::make(ActionKind::RecvB, a.stage, a.microbatch));
    }
  }

  void sends_for(const Action& a) {
    if (a.kind == ActionKind::F) {
      if (remote(schedule.next_stage(a.stage))) out->push_back(Action::make(ActionKind::SendF, a.stage, a.microbatch));
    } else if (is_backward(a.kind)) {
      if (remote(schedule.prev_stage(a.stage))) out->push_back(Action::make(ActionKind::SendB, a.stage, a.microbatch));
    }
  }

  void lower_action(const Action& a) {
    if (a.kind == ActionKind::Overlap) {
      receives_for(a.forward_half());
      receives_for(a.backward_half());
      out->push_back(a);
      sends_for(a.forward_half());
      sends_for(a.backward_half());
      return;
    }
    receives_for(a);
    out->push_back(a);
    sends_for(a);
  }
};

}  // namespace

Schedule strip_communication(const Schedule& schedule) {
  Schedule stripped = schedule;
  for (auto& list : stripped.device_actions)
    std::erase_if(list, [](const Action& a) { return is_communication(a.kind); });
  return stripped;
}

Schedule lower(const Schedule& schedule) {
  Schedule lowered = schedule;
  Lowerer lowerer{schedule};
  for (int d = 0; d < schedule.num_devices; ++d) {
    std::vector<Action> list;
    list.reserve(schedule.device_actions[d].size() * 2);
    lowerer.out = &list;
    lowerer.device = d;
    for (const Action& a : schedule.device_actions[d])
      if (!is_communication(a.kind)) lowerer.lower_action(a);
    lowered.device_actions[d] = std::move(list);
  }
  return lowered;
}

}  // namespace flexpipe
