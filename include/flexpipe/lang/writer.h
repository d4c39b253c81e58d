// write_program: any schedule as a program of the schedule language.
#pragma once
// Any schedule written back as a program of the schedule language: its placement, routing and
// custom kinds as declarations, and each device's actions in order. Compiling the program gives a
// schedule equal to the original (operator==).
#include <string>

#include "flexpipe/ir/schedule.h"

namespace flexpipe {

// Throws Error for what the language cannot state: an action whose micro-batch does not fit its
// kind (a per-micro-batch action with micro-batch -1, an OPT with one), or a custom kind name that
// is not an upper-case name.
enum class ProgramStyle {
  // K(s) wherever stage s's counter names the action's micro-batch, and back-to-back runs of the
  // same actions as `repeat n { ... }`: 1F1B's device 0 is `repeat 4 { F(0) }`, `repeat 4 { B(0)
  // F(0) }`, `repeat 4 { B(0) }` at p = 4, m = 8. What a person edits.
  Compact,
  // K(s, mb) for every action, twelve to a line: what a tool diffs.
  Explicit,
};
std::string write_program(const Schedule& schedule, ProgramStyle style = ProgramStyle::Compact);

}  // namespace flexpipe
