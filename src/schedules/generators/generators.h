#pragma once
// Internal: each family of built-in generators registers its schedules here.
#include <vector>

#include "flexpipe/schedules/builtin.h"

namespace flexpipe::detail {

// GPipe, 1F1B, Interleaved 1F1B, Looped BFS, ZB-H1, ZB-H2 (src/schedules/generators/1f1b_family.cpp).
void register_1f1b_family(std::vector<BuiltinSchedule>& registry);
// ZB-V, V-Half, V-Min, DualPipeV, DualPipe (src/schedules/generators/v_family.cpp).
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
BuiltinSchedule v_half_schedule();
BuiltinSchedule v_min_schedule();
BuiltinSchedule dualpipev_schedule();
BuiltinSchedule dualpipe_schedule();

}  // namespace flexpipe::detail
