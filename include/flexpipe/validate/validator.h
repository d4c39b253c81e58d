// Checks a schedule against the rules every runtime relies on: counts of actions per
// (stage, micro-batch), dependencies, placement, communication pairing and deadlock freedom under
// the runtime's semantics (a device blocks on a receive right before the action that needs it;
// sends are asynchronous). Reports every error, never stops at the first, never hangs.
#pragma once
#include <string>
#include <vector>

#include "flexpipe/ir/schedule.h"

namespace flexpipe {

struct Diagnostic {
  int device = -1;     // -1 when the error is not tied to one device
  int position = -1;   // index in the device's action list; -1 when the action is missing
  std::string action;  // the action's cell form, e.g. "1F3"; empty when none
  std::string message;
  // "device 1 #5 1F3: F(1,3) runs before F(0,3)" / "stage 2 micro-batch 3: missing F"
  std::string to_string() const;
};

std::vector<Diagnostic> validate(const Schedule& schedule);

// Throws Error with every diagnostic, one per line, when the schedule is invalid.
void check_valid(const Schedule& schedule);

}  // namespace flexpipe
