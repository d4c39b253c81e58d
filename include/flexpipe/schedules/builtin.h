#pragma once
// The built-in schedules' catalog (names, descriptions, parameter checks) and their C++ generators
// (compute-only: no SEND/RECV, no OPT). Callers are served the library's programs (library.h:
// compile_builtin, library_schedule); the generators are the oracle those programs are tested
// against (tests/schedules, tests/lang).
#include <string>
#include <string_view>
#include <vector>

#include "flexpipe/ir/schedule.h"

namespace flexpipe {

struct ScheduleParams {
  int devices = 4;       // p
  int microbatches = 0;  // m; 0: the schedule's default for p
  int chunks = 0;        // v, stages per device per pipeline; 0: the schedule's default
};

struct BuiltinSchedule {
  std::string name;                                 // canonical, e.g. "1f1b", "interleaved-1f1b", "zb-h1"
  std::string description;                          // one line
  int default_chunks;                               // v used when ScheduleParams::chunks is 0
  bool chunks_adjustable;                           // whether v may be chosen
  Schedule (*build)(const ScheduleParams& params);  // params already resolved and checked
  // Returns an empty string when (p, m, v) is acceptable, else the reason ("needs m >= p").
  std::string (*check)(const ScheduleParams& params);
};

const std::vector<BuiltinSchedule>& builtin_schedules();
// Looks a name up case-insensitively, ignoring '-', '_' and spaces; nullptr when unknown.
const BuiltinSchedule* find_builtin(std::string_view name);
// Looks `name` up and fills in and checks `params` (defaults for 0); throws Error for unknown names
// and impossible parameters.
const BuiltinSchedule& resolve_builtin(std::string_view name, ScheduleParams& params);
// The generator's schedule by name, the test oracle (serve library_schedule instead); throws Error
// for unknown names and impossible parameters.
Schedule make_builtin(std::string_view name, ScheduleParams params);

}  // namespace flexpipe
