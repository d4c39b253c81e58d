// The structural checks simulate() and lower_bound() make before indexing anything, so that a
// malformed schedule gets one clear message (simulate's Error, try_simulate's status) instead of an
// out-of-range read. Ordering, counts and pairing are the validator's job (docs/validator.md); these
// only keep the simulator safe.
#include <fmt/format.h>

#include "simulator_detail.h"

namespace flexpipe::sim {

std::string schedule_shape_problem(const Schedule& schedule) {
  const int devices = schedule.num_devices;
  if (devices <= 0) return fmt::format("schedule '{}' has no devices", schedule.name);
  if (schedule.num_microbatches <= 0) return fmt::format("schedule '{}' has no micro-batches", schedule.name);
  if (schedule.stages_per_pipeline <= 0 || schedule.num_pipelines <= 0)
    return fmt::format("schedule '{}' has no stages", schedule.name);
  if (schedule.device_actions.size() != static_cast<size_t>(devices))
    return fmt::format("schedule '{}' has {} devices but action lists for {}", schedule.name, devices,
                       schedule.device_actions.size());
  if (schedule.stage_device.size() != static_cast<size_t>(schedule.num_stages()))
    return fmt::format("schedule '{}' places {} stages but has {}", schedule.name, schedule.stage_device.size(),
                       schedule.num_stages());
  for (int s = 0; s < schedule.num_stages(); ++s)
    if (schedule.stage_device[s] < 0 || schedule.stage_device[s] >= devices)
      return fmt::format("schedule '{}' places stage {} on device {}, which does not exist", schedule.name, s,
                         schedule.stage_device[s]);
  if (!schedule.microbatch_pipeline.empty()) {
    if (schedule.microbatch_pipeline.size() != static_cast<size_t>(schedule.num_microbatches))
      return fmt::format("schedule '{}' assigns {} micro-batches to pipelines but has {}", schedule.name,
                         schedule.microbatch_pipeline.size(), schedule.num_microbatches);
    for (int m = 0; m < schedule.num_microbatches; ++m)
      if (schedule.microbatch_pipeline[m] < 0 || schedule.microbatch_pipeline[m] >= schedule.num_pipelines)
        return fmt::format("schedule '{}' sends micro-batch {} through pipeline {}, which does not exist",
                           schedule.name, m, schedule.microbatch_pipeline[m]);
  }
  return "";
}

namespace {

std::string problem_at(const Schedule& schedule, int device, int position, const Action& action,
                       const std::string& message) {
  return fmt::format("device {} #{} {}: {}", device, position, schedule.action_name(action), message);
}

std::string stage_problem(const Schedule& schedule, int device, int position, const Action& action, int stage,
                          int microbatch, bool needs_microbatch) {
  if (stage < 0 || stage >= schedule.num_stages())
    return problem_at(schedule, device, position, action,
                      fmt::format("stage {} does not exist (the schedule has {})", stage, schedule.num_stages()));
  if (schedule.stage_device[stage] != device)
    return problem_at(schedule, device, position, action,
                      fmt::format("stage {} is placed on device {}", stage, schedule.stage_device[stage]));
  if (needs_microbatch && (microbatch < 0 || microbatch >= schedule.num_microbatches))
    return problem_at(schedule, device, position, action,
                      fmt::format("micro-batch {} does not exist (the schedule has {})", microbatch,
                                  schedule.num_microbatches));
  return "";
}

// A transfer needs a peer stage, and one on another device: same-device hand-offs need none.
std::string peer_problem(const Schedule& schedule, int device, int position, const Action& action, int peer) {
  if (peer < 0)
    return problem_at(schedule, device, position, action,
                      fmt::format("stage {} is the {} stage of its pipeline: there is no peer", action.stage,
                                  schedule.is_first_stage(action.stage) ? "first" : "last"));
  if (schedule.stage_device[peer] == device)
    return problem_at(schedule, device, position, action,
                      fmt::format("stages {} and {} are both on device {}: nothing crosses a link", action.stage, peer,
                                  device));
  return "";
}

}  // namespace

std::string action_problem(const Schedule& schedule, int device, int position, const Action& action) {
  auto own_stage = [&] {
    return stage_problem(schedule, device, position, action, action.stage, action.microbatch, true);
  };
  // The peer is checked only once the action's own stage exists.
  auto own_stage_then_peer = [&](int peer) {
    std::string problem = own_stage();
    return problem.empty() ? peer_problem(schedule, device, position, action, peer) : problem;
  };
  switch (action.kind) {
    case ActionKind::F:
    case ActionKind::B:
    case ActionKind::I:
    case ActionKind::W:
    case ActionKind::R:
    case ActionKind::Offload:
    case ActionKind::Reload: return own_stage();
    case ActionKind::SendF:
    case ActionKind::RecvB: return own_stage_then_peer(schedule.next_stage(action.stage));
    case ActionKind::SendB:
    case ActionKind::RecvF: return own_stage_then_peer(schedule.prev_stage(action.stage));
    case ActionKind::Opt: return stage_problem(schedule, device, position, action, action.stage, -1, false);
    case ActionKind::Overlap: {
      if (action.sub_kind != ActionKind::B && action.sub_kind != ActionKind::I)
        return problem_at(schedule, device, position, action, "the backward half of an overlapped pair must be B or I");
      std::string problem = own_stage();
      return problem.empty()
                 ? stage_problem(schedule, device, position, action, action.stage2, action.microbatch2, true)
                 : problem;
    }
    case ActionKind::Custom:
      if (action.custom >= schedule.custom_ops.size())
        return problem_at(schedule, device, position, action,
                          fmt::format("custom kind {} is not declared (the schedule declares {})", action.custom,
                                      schedule.custom_ops.size()));
      return stage_problem(schedule, device, position, action, action.stage, action.microbatch,
                           schedule.custom_ops[action.custom].per_microbatch);
  }
  return problem_at(schedule, device, position, action,
                    fmt::format("unknown action kind {}", static_cast<int>(action.kind)));
}

}  // namespace flexpipe::sim
