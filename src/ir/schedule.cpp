// A schedule's counts and action names, placements (loop, V, bidirectional) and stages per device.
#include "flexpipe/ir/schedule.h"

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

int64_t Schedule::num_actions() const {
  int64_t total = 0;
  for (const auto& list : device_actions) total += static_cast<int64_t>(list.size());
  return total;
}

bool Schedule::has_communication() const {
  for (const auto& list : device_actions)
    for (const Action& a : list)
      if (is_communication(a.kind)) return true;
  return false;
}

std::string Schedule::action_name(const Action& action) const {
  if (action.kind == ActionKind::Custom && action.custom < custom_ops.size()) {
    const std::string& name = custom_ops[action.custom].name;
    if (action.microbatch < 0) return fmt::format("{}{}", action.stage, name);
    return fmt::format("{}{}{}", action.stage, name, action.microbatch);
  }
  return to_string(action);
}

std::vector<int32_t> loop_placement(int devices, int stages) {
  std::vector<int32_t> placement(stages);
  for (int s = 0; s < stages; ++s) placement[s] = s % devices;
  return placement;
}

std::vector<int32_t> v_placement(int devices, int stages) {
  std::vector<int32_t> placement(stages);
  for (int s = 0; s < stages; ++s) {
    int lap = s / devices, offset = s % devices;
    placement[s] = (lap % 2 == 0) ? offset : devices - 1 - offset;
  }
  return placement;
}

std::vector<int32_t> bidirectional_placement(int devices) {
  std::vector<int32_t> placement(2 * devices);
  for (int j = 0; j < devices; ++j) {
    placement[j] = j;
    placement[devices + j] = devices - 1 - j;
  }
  return placement;
}

Schedule make_schedule(std::string name, int devices, int microbatches, std::vector<int32_t> stage_device,
                       int num_pipelines) {
  if (devices <= 0) throw Error(fmt::format("a schedule needs at least one device (got {})", devices));
  if (microbatches <= 0) throw Error(fmt::format("a schedule needs at least one micro-batch (got {})", microbatches));
  if (num_pipelines <= 0 || stage_device.size() % num_pipelines != 0)
    throw Error(fmt::format("{} stages cannot form {} pipelines", stage_device.size(), num_pipelines));
  Schedule s;
  s.name = std::move(name);
  s.num_devices = devices;
  s.num_microbatches = microbatches;
  s.num_pipelines = num_pipelines;
  s.stages_per_pipeline = static_cast<int>(stage_device.size()) / num_pipelines;
  s.stage_device = std::move(stage_device);
  s.device_actions.assign(devices, {});
  return s;
}

std::vector<int> stages_on_device(const Schedule& schedule, int device) {
  std::vector<int> stages;
  for (int s = 0; s < schedule.num_stages(); ++s)
    if (schedule.stage_device[s] == device) stages.push_back(s);
  return stages;
}

std::vector<char> split_backward_stages(const Schedule& schedule) {
  std::vector<char> split(schedule.num_stages(), 0);
  for (const std::vector<Action>& actions : schedule.device_actions)
    for (const Action& a : actions) {
      if (a.kind == ActionKind::I) split[a.stage] = 1;
      if (a.kind == ActionKind::Overlap && a.sub_kind == ActionKind::I) split[a.stage2] = 1;
    }
  return split;
}

}  // namespace flexpipe
