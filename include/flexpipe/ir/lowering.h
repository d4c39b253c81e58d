// Lowering: make communication explicit. Inserts a SEND right after each action whose output
// crosses to another device and a RECV right before each action that needs it; hand-offs between
// stages on one device (a V placement's turn) stay local. Since receives are posted exactly where
// a runtime would block anyway, a schedule that is deadlock-free before lowering stays so after.
#pragma once
#include "flexpipe/ir/schedule.h"

namespace flexpipe {

// Idempotent: existing SEND/RECV actions are dropped and inserted again.
Schedule lower(const Schedule& schedule);
// Drops every SEND/RECV: the compute-only form.
Schedule strip_communication(const Schedule& schedule);

}  // namespace flexpipe
