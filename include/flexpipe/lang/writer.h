#pragma once
// Any schedule written back as a program of the schedule language: its placement, routing and
// custom kinds as declarations, and each device's actions as an explicit list. Compiling the
// program gives a schedule equal to the original (operator==).
#include <string>

#include "flexpipe/core/schedule.h"

namespace flexpipe {

// Throws Error for what the language cannot state: an action whose micro-batch does not fit its
// kind (a per-micro-batch action with micro-batch -1, an OPT with one), or a custom kind name that
// is not an upper-case name.
std::string write_program(const Schedule& schedule);

}  // namespace flexpipe
