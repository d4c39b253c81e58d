// Internal: the C++ generators, one per built-in, which the library's programs are tested against.
#pragma once
#include <vector>

#include "flexpipe/schedules/builtin.h"

namespace flexpipe::schedules {

// Each takes parameters resolve_builtin has filled in and checked against the built-in's program.
// 1F1B family, one per file (src/schedules/generators/<name>.cpp).
Schedule generate_gpipe(const ScheduleParams& params);
Schedule generate_1f1b(const ScheduleParams& params);
Schedule generate_interleaved_1f1b(const ScheduleParams& params);
Schedule generate_looped_bfs(const ScheduleParams& params);
Schedule generate_zb_h1(const ScheduleParams& params);
Schedule generate_zb_h2(const ScheduleParams& params);
// V family: ZB-V (zb_v.cpp), ZB-V adaptive (zb_v_adaptive.cpp), V-Half and V-Min
// (v_controllable_memory.cpp), DualPipeV and DualPipe (dualpipe.cpp).
Schedule generate_zb_v(const ScheduleParams& params);
Schedule generate_zb_v_adaptive(const ScheduleParams& params);
Schedule generate_v_half(const ScheduleParams& params);
Schedule generate_v_min(const ScheduleParams& params);
Schedule generate_dualpipev(const ScheduleParams& params);
Schedule generate_dualpipe(const ScheduleParams& params);

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

}  // namespace flexpipe::schedules
