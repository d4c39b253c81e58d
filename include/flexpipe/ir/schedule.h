// A pipeline schedule as data: which device holds each stage, and the ordered actions of each device.
//
// Stages are numbered globally. A schedule may run several pipelines (replicas) at once, as DualPipe
// and Chimera do: stage s belongs to pipeline s / stages_per_pipeline and computes model chunk
// s % stages_per_pipeline; every micro-batch flows through exactly one pipeline.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "flexpipe/ir/action.h"

namespace flexpipe {

// A user-declared operation kind. A custom action (s, m) runs after each `after` dependency and
// before each `before` dependency, where a dependency names an action kind at stage s + stage_offset
// of the same pipeline and the same micro-batch (or all micro-batches of that stage).
struct CustomDependency {
  ActionKind kind = ActionKind::F;
  int stage_offset = 0;
  bool all_microbatches = false;
  friend bool operator==(const CustomDependency&, const CustomDependency&) = default;
};

struct CustomOpKind {
  std::string name;                      // upper-case letters, digits and '_'; not a built-in kind
  std::vector<CustomDependency> after;   // must have run before this action
  std::vector<CustomDependency> before;  // must run after this action
  double duration = 0;                   // in the cost table's time unit
  double memory = 0;                     // bytes allocated at start (negative: released at end)
  bool communicates = false;             // runs off the compute stream, like a send
  bool per_microbatch = true;            // false: one action per stage, micro-batch -1
  friend bool operator==(const CustomOpKind&, const CustomOpKind&) = default;
};

// The largest schedules any reader accepts: the language refuses more, and a file that asks for more
// is refused before anything is allocated for it.
inline constexpr int64_t kMaxDevices = 1 << 16;
inline constexpr int64_t kMaxStages = 1 << 20;
inline constexpr int64_t kMaxMicrobatches = 1 << 24;

struct Schedule {
  std::string name;
  int num_devices = 0;
  int num_microbatches = 0;
  int stages_per_pipeline = 0;
  int num_pipelines = 1;
  std::vector<int32_t> stage_device;                // global stage -> device
  std::vector<int32_t> microbatch_pipeline;         // micro-batch -> pipeline; empty: all in pipeline 0
  std::vector<std::vector<Action>> device_actions;  // per device, in execution order
  std::vector<CustomOpKind> custom_ops;

  int num_stages() const { return stages_per_pipeline * num_pipelines; }
  int pipeline_of_stage(int stage) const { return stage / stages_per_pipeline; }
  int chunk_of_stage(int stage) const { return stage % stages_per_pipeline; }
  bool is_first_stage(int stage) const { return chunk_of_stage(stage) == 0; }
  bool is_last_stage(int stage) const { return chunk_of_stage(stage) == stages_per_pipeline - 1; }
  int next_stage(int stage) const { return is_last_stage(stage) ? -1 : stage + 1; }
  int prev_stage(int stage) const { return is_first_stage(stage) ? -1 : stage - 1; }
  int pipeline_of_microbatch(int mb) const { return microbatch_pipeline.empty() ? 0 : microbatch_pipeline[mb]; }
  // Global stage that runs model chunk `chunk` in micro-batch `mb`'s pipeline.
  int stage_for(int chunk, int mb) const { return pipeline_of_microbatch(mb) * stages_per_pipeline + chunk; }
  int64_t num_actions() const;
  bool has_communication() const;                       // true once lowered (or loaded in compute+comms form)
  std::string action_name(const Action& action) const;  // to_string, with custom kinds' names

  friend bool operator==(const Schedule&, const Schedule&) = default;
};

// Placements: stage -> device.
std::vector<int32_t> loop_placement(int devices, int stages);  // stage s on device s % devices
std::vector<int32_t> v_placement(int devices, int stages);     // 0..p-1 then p-1..0, repeated
// DualPipe: pipeline 0 stage j on device j, pipeline 1 stage j on device p-1-j.
std::vector<int32_t> bidirectional_placement(int devices);

// An empty schedule with devices, placement and micro-batches set and no actions yet.
Schedule make_schedule(std::string name, int devices, int microbatches, std::vector<int32_t> stage_device,
                       int num_pipelines = 1);

// The stages a device holds, in increasing order.
std::vector<int> stages_on_device(const Schedule& schedule, int device);

// Per global stage, 1 when its backward is split into I and W: an I runs on it, alone or inside an
// overlap. Memory depends on it: before a split backward a recomputing stage rebuilds everything at
// once, because W still needs the weighted operators' saved tensors.
std::vector<char> split_backward_stages(const Schedule& schedule);

}  // namespace flexpipe
