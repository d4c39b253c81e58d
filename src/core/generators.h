#pragma once
// Internal: each family of built-in generators registers its schedules here.
#include <vector>

#include "flexpipe/core/builtin_schedules.h"

namespace flexpipe::detail {

// GPipe, 1F1B, Interleaved 1F1B, Looped BFS, ZB-H1, ZB-H2 (src/core/schedules_1f1b_family.cpp).
void register_1f1b_family(std::vector<BuiltinSchedule>& registry);
// ZB-V, V-Half, V-Min, DualPipeV, DualPipe (src/core/schedules_v_family.cpp).
void register_v_family(std::vector<BuiltinSchedule>& registry);

}  // namespace flexpipe::detail
