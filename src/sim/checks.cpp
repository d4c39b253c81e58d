// The structural checks simulate() and lower_bound() make before indexing anything, so that a
// malformed schedule gets one clear Error instead of an out-of-range read. Ordering, counts and
// pairing are the validator's job (docs/validator.md); these only keep the simulator safe.
#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "simulator_detail.h"

namespace flexpipe::detail {

void check_schedule_shape(const Schedule& schedule) {
  const int devices = schedule.num_devices;
  if (devices <= 0) throw Error(fmt::format("schedule '{}' has no devices", schedule.name));
  if (schedule.num_microbatches <= 0) throw Error(fmt::format("schedule '{}' has no micro-batches", schedule.name));
  if (schedule.stages_per_pipeline <= 0 || schedule.num_pipelines <= 0)
    throw Error(fmt::format("schedule '{}' has no stages", schedule.name));
  if (schedule.device_actions.size() != static_cast<size_t>(devices))
    throw Error(fmt::format("schedule '{}' has {} devices but action lists for {}", schedule.name, devices,
                            schedule.device_actions.size()));
  if (schedule.stage_device.size() != static_cast<size_t>(schedule.num_stages()))
    throw Error(fmt::format("schedule '{}' places {} stages but has {}", schedule.name, schedule.stage_device.size(),
                            schedule.num_stages()));
  for (int s = 0; s < schedule.num_stages(); ++s)
    if (schedule.stage_device[s] < 0 || schedule.stage_device[s] >= devices)
      throw Error(fmt::format("schedule '{}' places stage {} on device {}, which does not exist", schedule.name, s,
                              schedule.stage_device[s]));
  if (!schedule.microbatch_pipeline.empty()) {
    if (schedule.microbatch_pipeline.size() != static_cast<size_t>(schedule.num_microbatches))
      throw Error(fmt::format("schedule '{}' assigns {} micro-batches to pipelines but has {}", schedule.name,
                              schedule.microbatch_pipeline.size(), schedule.num_microbatches));
    for (int m = 0; m < schedule.num_microbatches; ++m)
      if (schedule.microbatch_pipeline[m] < 0 || schedule.microbatch_pipeline[m] >= schedule.num_pipelines)
        throw Error(fmt::format("schedule '{}' sends micro-batch {} through pipeline {}, which does not exist",
                                schedule.name, m, schedule.microbatch_pipeline[m]));
  }
}

namespace {

[[noreturn]] void fail(const Schedule& schedule, int device, int position, const Action& action,
                       const std::string& message) {
  throw Error(fmt::format("device {} #{} {}: {}", device, position, schedule.action_name(action), message));
}

void check_stage(const Schedule& schedule, int device, int position, const Action& action, int stage, int microbatch,
                 bool needs_microbatch) {
  if (stage < 0 || stage >= schedule.num_stages())
    fail(schedule, device, position, action,
         fmt::format("stage {} does not exist (the schedule has {})", stage, schedule.num_stages()));
  if (schedule.stage_device[stage] != device)
    fail(schedule, device, position, action,
         fmt::format("stage {} is placed on device {}", stage, schedule.stage_device[stage]));
  if (needs_microbatch && (microbatch < 0 || microbatch >= schedule.num_microbatches))
    fail(schedule, device, position, action,
         fmt::format("micro-batch {} does not exist (the schedule has {})", microbatch, schedule.num_microbatches));
}

// A transfer needs a peer stage, and one on another device: same-device hand-offs need none.
void check_peer(const Schedule& schedule, int device, int position, const Action& action, int peer) {
  if (peer < 0)
    fail(schedule, device, position, action,
         fmt::format("stage {} is the {} stage of its pipeline: there is no peer", action.stage,
                     schedule.is_first_stage(action.stage) ? "first" : "last"));
  if (schedule.stage_device[peer] == device)
    fail(schedule, device, position, action,
         fmt::format("stages {} and {} are both on device {}: nothing crosses a link", action.stage, peer, device));
}

}  // namespace

void check_action(const Schedule& schedule, int device, int position, const Action& action) {
  switch (action.kind) {
    case ActionKind::F:
    case ActionKind::B:
    case ActionKind::I:
    case ActionKind::W:
    case ActionKind::R:
    case ActionKind::Offload:
    case ActionKind::Reload:
      check_stage(schedule, device, position, action, action.stage, action.microbatch, true);
      return;
    case ActionKind::SendF:
    case ActionKind::RecvB:
      check_stage(schedule, device, position, action, action.stage, action.microbatch, true);
      check_peer(schedule, device, position, action, schedule.next_stage(action.stage));
      return;
    case ActionKind::SendB:
    case ActionKind::RecvF:
      check_stage(schedule, device, position, action, action.stage, action.microbatch, true);
      check_peer(schedule, device, position, action, schedule.prev_stage(action.stage));
      return;
    case ActionKind::Opt: check_stage(schedule, device, position, action, action.stage, -1, false); return;
    case ActionKind::Overlap:
      if (action.sub_kind != ActionKind::B && action.sub_kind != ActionKind::I)
        fail(schedule, device, position, action, "the backward half of an overlapped pair must be B or I");
      check_stage(schedule, device, position, action, action.stage, action.microbatch, true);
      check_stage(schedule, device, position, action, action.stage2, action.microbatch2, true);
      return;
    case ActionKind::Custom:
      if (action.custom >= schedule.custom_ops.size())
        fail(schedule, device, position, action,
             fmt::format("custom kind {} is not declared (the schedule declares {})", action.custom,
                         schedule.custom_ops.size()));
      check_stage(schedule, device, position, action, action.stage, action.microbatch,
                  schedule.custom_ops[action.custom].per_microbatch);
      return;
  }
  fail(schedule, device, position, action, fmt::format("unknown action kind {}", static_cast<int>(action.kind)));
}

}  // namespace flexpipe::detail
