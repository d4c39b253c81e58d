// Makes per-stage memory decisions explicit in a schedule: inserts R (recompute), OFFLOAD and RELOAD
// actions for every micro-batch of the flagged stages, at the positions a runtime wants them.
// What an R or OFFLOAD then does per operator is the runtime's and the cost table's business
// (docs/runtime.md, docs/simulator.md); this pass only places the actions.
#pragma once
#include <vector>

#include "flexpipe/ir/schedule.h"

namespace flexpipe {

// One flag per global stage id (size == schedule.num_stages(); throws Error otherwise). For every
// (stage s, micro-batch m) that runs on s, in the list of s's device:
//   recompute_stage[s]: R(s,m) right before the action that runs the backward of (s,m) (B, I, or an
//     OVERLAP_F_B whose backward half is (s,m)).
//   offload_stage[s]: OFFLOAD(s,m) right after the action that runs the forward of (s,m) (F, or an
//     OVERLAP_F_B whose forward half is (s,m)); RELOAD(s,m) one compute action ahead of the backward
//     (or of R(s,m) when there is one): right before the last compute action that precedes it and
//     follows the OFFLOAD, so the transfer overlaps that compute (before that action's R when it is a
//     backward with its R right before it: an R stays right before its backward); right before the
//     backward (or R) when there is no such action.
//   reload_before_recompute[s] (checkpoint offload): RELOAD(s,m) right before R(s,m) (or the backward
//     when there is none) instead, so that only the micro-batch being rebuilt has its data back; its
//     transfer is not hidden. Empty: no stage.
// (s,m) pairs that already have an R (resp. an OFFLOAD) get none. Works on compute-only and lowered
// schedules alike (SEND/RECV are left where they are); a valid schedule stays valid. Throws Error for a
// flagged (s,m) that has a forward but no backward on its device, or the other way round.
Schedule add_memory_actions(const Schedule& schedule, const std::vector<char>& recompute_stage,
                            const std::vector<char>& offload_stage,
                            const std::vector<char>& reload_before_recompute = {});

}  // namespace flexpipe
