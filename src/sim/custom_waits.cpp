// Declared custom dependencies as extra waits (docs/simulator.md, "Custom operations"): a custom
// action waits for its `after` dependencies, and every action a `before` dependency names waits
// for the custom action. A dependency on every micro-batch of a stage waits for the last such
// event: all of a stage's events of one slot come from one device's list, through one FIFO
// stream or link, so the last in list order ends last.
#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "simulator_detail.h"

namespace flexpipe::sim {

EventRef event_of(const Schedule& schedule, ActionKind kind, int stage, int custom) {
  switch (kind) {
    case ActionKind::F: return {stage, kForwardDone};
    case ActionKind::B:
    case ActionKind::I: return {stage, kInputGradDone};
    case ActionKind::W: return {stage, kWeightGradDone};
    case ActionKind::R: return {stage, kRecomputeDone};
    case ActionKind::SendF: {
      const int next = schedule.next_stage(stage);
      return next < 0 ? EventRef{} : EventRef{next, kForwardArrived};
    }
    case ActionKind::SendB: {
      const int prev = schedule.prev_stage(stage);
      return prev < 0 ? EventRef{} : EventRef{prev, kGradArrived};
    }
    case ActionKind::RecvF: return {stage, kForwardArrived};
    case ActionKind::RecvB: return {stage, kGradArrived};
    case ActionKind::Offload: return {stage, kOffloadDone};
    case ActionKind::Reload: return {stage, kReloadDone};
    case ActionKind::Opt: return {stage, kOptimizerDone};
    case ActionKind::Custom: return {stage, kNumFixedSlots + custom};
    case ActionKind::Overlap: return {};
  }
  return {};
}

namespace {

int column_of(const Schedule& schedule, const KeyLayout& layout, const Action& action) {
  const bool stage_wide = action.kind == ActionKind::Opt ||
                          (action.kind == ActionKind::Custom && !schedule.custom_ops[action.custom].per_microbatch);
  return stage_wide ? layout.stage_wide_column() : action.microbatch;
}

// Calls emit(key) for every event the action produces.
template <typename Emit>
void for_each_produced(const Schedule& schedule, const KeyLayout& layout, const Action& action, Emit emit) {
  auto produce = [&](ActionKind kind, int stage, int column, int custom) {
    const EventRef event = event_of(schedule, kind, stage, custom);
    if (event.slot >= 0) emit(layout.key(event.stage, column, event.slot));
  };
  switch (action.kind) {
    case ActionKind::RecvF:
    case ActionKind::RecvB: return;
    case ActionKind::B:
      produce(ActionKind::B, action.stage, action.microbatch, 0);
      produce(ActionKind::W, action.stage, action.microbatch, 0);
      return;
    case ActionKind::Overlap:
      produce(ActionKind::F, action.stage, action.microbatch, 0);
      produce(action.sub_kind, action.stage2, action.microbatch2, 0);
      if (action.sub_kind == ActionKind::B) produce(ActionKind::W, action.stage2, action.microbatch2, 0);
      return;
    default: produce(action.kind, action.stage, column_of(schedule, layout, action), action.custom);
  }
}

// Calls emit(key) for each event that stands for the action itself as a `before` target.
template <typename Emit>
void for_each_identity(const Schedule& schedule, const KeyLayout& layout, const Action& action, Emit emit) {
  auto identity = [&](ActionKind kind, int stage, int column, int custom) {
    const EventRef event = event_of(schedule, kind, stage, custom);
    if (event.slot >= 0) emit(event.stage, column, event.slot);
  };
  switch (action.kind) {
    case ActionKind::RecvF:
    case ActionKind::RecvB: return;  // a receive posts no work that could be held back
    case ActionKind::Overlap:
      identity(ActionKind::F, action.stage, action.microbatch, 0);
      identity(action.sub_kind, action.stage2, action.microbatch2, 0);
      return;
    default: identity(action.kind, action.stage, column_of(schedule, layout, action), action.custom);
  }
}

}  // namespace

std::string build_custom_waits(const Schedule& schedule, const KeyLayout& layout,
                               std::span<const int64_t> device_offset, CustomWaits& waits) {
  waits.first.clear();
  waits.keys.clear();
  if (schedule.custom_ops.empty()) return "";

  // The last event of each (stage, slot), for dependencies on every micro-batch.
  std::vector<int64_t> last(static_cast<size_t>(layout.stages) * layout.slots, -1);
  for (const auto& list : schedule.device_actions)
    for (const Action& action : list)
      for_each_produced(schedule, layout, action, [&](int64_t key) {
        last[static_cast<size_t>(layout.stage_of(key)) * layout.slots + layout.slot_of(key)] = key;
      });

  // Resolves a dependency of a custom action at (stage, micro-batch) to an event: {stage, slot},
  // or slot -1 when the dependency names a stage outside the pipeline (nothing to wait for) or
  // one the simulator cannot order against (then `problem` says so).
  std::string problem;
  auto resolve = [&](const CustomOpKind& op, const CustomDependency& dependency, int stage) {
    if (dependency.kind == ActionKind::Overlap || dependency.kind == ActionKind::Custom) {
      problem = fmt::format("custom kind {}: the simulator cannot order it against {} actions", op.name,
                            kind_name(dependency.kind));
      return EventRef{};
    }
    const int chunk = schedule.chunk_of_stage(stage) + dependency.stage_offset;
    if (chunk < 0 || chunk >= schedule.stages_per_pipeline) return EventRef{};
    return event_of(schedule, dependency.kind, stage + dependency.stage_offset, 0);
  };
  // A stage-wide custom action (micro-batch -1) depends on every micro-batch of a per-micro-batch kind.
  auto covers_all = [](const CustomDependency& dependency, const Action& action) {
    return dependency.all_microbatches || (action.microbatch < 0 && dependency.kind != ActionKind::Opt);
  };
  auto column_for = [&](const CustomDependency& dependency, const Action& action) {
    return dependency.kind == ActionKind::Opt ? layout.stage_wide_column() : action.microbatch;
  };

  // (target event, custom action's event) for every `before` dependency, sorted by target.
  std::vector<std::pair<int64_t, int64_t>> held_back;
  for (const auto& list : schedule.device_actions)
    for (const Action& action : list) {
      if (action.kind != ActionKind::Custom) continue;
      const CustomOpKind& op = schedule.custom_ops[action.custom];
      const int64_t own = layout.key(action.stage, column_of(schedule, layout, action), kNumFixedSlots + action.custom);
      for (const CustomDependency& dependency : op.before) {
        const EventRef target = resolve(op, dependency, action.stage);
        if (!problem.empty()) return problem;
        if (target.slot < 0) continue;
        const int column = covers_all(dependency, action) ? layout.all_column() : column_for(dependency, action);
        held_back.emplace_back(layout.key(target.stage, column, target.slot), own);
      }
    }
  std::sort(held_back.begin(), held_back.end());

  const size_t actions = static_cast<size_t>(device_offset[schedule.num_devices]);
  waits.first.assign(actions + 1, 0);
  for (int d = 0; d < schedule.num_devices; ++d) {
    const auto& list = schedule.device_actions[d];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& action = list[i];
      if (action.kind == ActionKind::Custom) {
        const CustomOpKind& op = schedule.custom_ops[action.custom];
        for (const CustomDependency& dependency : op.after) {
          const EventRef event = resolve(op, dependency, action.stage);
          if (!problem.empty()) return problem;
          if (event.slot < 0) continue;
          if (!covers_all(dependency, action)) {
            waits.keys.push_back(layout.key(event.stage, column_for(dependency, action), event.slot));
          } else if (const int64_t key = last[static_cast<size_t>(event.stage) * layout.slots + event.slot]; key >= 0) {
            waits.keys.push_back(key);
          }
        }
      }
      if (!held_back.empty())
        for_each_identity(schedule, layout, action, [&](int stage, int column, int slot) {
          for (int64_t target : {layout.key(stage, column, slot), layout.key(stage, layout.all_column(), slot)}) {
            auto it =
                std::lower_bound(held_back.begin(), held_back.end(), std::pair<int64_t, int64_t>{target, INT64_MIN});
            for (; it != held_back.end() && it->first == target; ++it) waits.keys.push_back(it->second);
          }
        });
      waits.first[device_offset[d] + i + 1] = static_cast<int64_t>(waits.keys.size());
    }
  }
  return "";
}

}  // namespace flexpipe::sim
