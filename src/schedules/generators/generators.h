#pragma once
// Internal: each family of built-in generators registers its schedules here.
#include <vector>

#include "flexpipe/schedules/builtin.h"

namespace flexpipe::detail {

// GPipe, 1F1B, Interleaved 1F1B, Looped BFS, ZB-H1, ZB-H2 (src/schedules/generators/1f1b_family.cpp).
void register_1f1b_family(std::vector<BuiltinSchedule>& registry);
// ZB-V, ZB-V adaptive, V-Half, V-Min, DualPipeV, DualPipe (src/schedules/generators/v_family.cpp).
void register_v_family(std::vector<BuiltinSchedule>& registry);

// The 1F1B family's registry entries, one generator per file (src/schedules/generators/<name>.cpp).
BuiltinSchedule gpipe_schedule();
BuiltinSchedule one_f_one_b_schedule();
BuiltinSchedule interleaved_1f1b_schedule();
BuiltinSchedule looped_bfs_schedule();
BuiltinSchedule zb_h1_schedule();
BuiltinSchedule zb_h2_schedule();

// The V family's registry entries: ZB-V (src/schedules/generators/zb_v.cpp), V-Half and V-Min
// (src/schedules/generators/v_controllable_memory.cpp), DualPipeV and DualPipe (src/schedules/generators/dualpipe.cpp).
BuiltinSchedule zb_v_schedule();
BuiltinSchedule zb_v_adaptive_schedule();
BuiltinSchedule v_half_schedule();
BuiltinSchedule v_min_schedule();
BuiltinSchedule dualpipev_schedule();
BuiltinSchedule dualpipe_schedule();

// The inputs of the Zero Bubble authors' V construction (src/schedules/generators/zb_v_adaptive.cpp);
// the built-in `zb-v-adaptive` takes the defaults. Times are per chunk (one stage of the V); memory
// is in chunk activations, each pass adding its amount on its device (by default an activation is
// held from its F until its W, as the simulator counts it without `freed_by_input`).
struct VConstructionInputs {
  double forward = 1, input = 1, weight = 1;  // F, I, W
  double comm = 0;                            // latency between neighbouring devices
  double forward_memory = 1, input_memory = 0, weight_memory = -1;
  double memory_limit = 0;  // per device; 0: 2p forward_memory, 1F1B's peak (p micro-batches of a full model)
};
// The construction for p devices and m micro-batches (any m >= 1; below p it runs for p and drops
// the rest). Throws std::logic_error if the construction cannot place a pass (a memory limit below
// what its warm-up needs).
Schedule zb_v_adaptive(int p, int m, const VConstructionInputs& inputs);

}  // namespace flexpipe::detail
