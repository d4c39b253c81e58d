// The built-in schedules' catalog, read from their programs, and make_builtin, their C++ test oracle.
#pragma once
// The programs are examples/schedules/NAME.fps, compiled into the binary. A built-in's name is its
// program's file name; its description, default chunks and parameter checks are what the program
// states (`description "..."`, `param v = ...`, `stages ...`, each `where`). Callers are served the
// programs (library.h: compile_builtin, library_schedule); the generators (compute-only: no
// SEND/RECV, no OPT) are never served, only compared with (tests/schedules, tests/lang).
#include <string>
#include <string_view>
#include <vector>

#include "flexpipe/ir/schedule.h"

namespace flexpipe {

struct ScheduleParams {
  int devices = 4;       // p
  int microbatches = 0;  // m; 0: the program's default for p
  int chunks = 0;        // v, stages per device per pipeline; 0: the schedule's default
};

struct BuiltinSchedule {
  std::string name;          // canonical, e.g. "1f1b", "interleaved-1f1b", "zb-h1": the program's file name
  std::string description;   // one line: the program's `description`
  int default_chunks = 1;    // v used when ScheduleParams::chunks is 0: the default of the program's
                             // `param v`, else its stages per pipeline per device at its defaults
  bool chunks_adjustable{};  // whether the program declares `param v`
  std::string_view program;  // the program's text
  // Returns an empty string when (p, m, v) meets the program's `where` conditions, else the first
  // failing condition's message ("needs m to be a multiple of p"). m = 0 is the program's default.
  std::string check(const ScheduleParams& params) const;
};

// The catalog entry of the program `text` named `name`; throws Error, located in `name`.fps, when
// the program states no description or lacks the parameters p and m every built-in takes.
BuiltinSchedule read_builtin(std::string_view name, std::string_view text);

// One entry per library program, in the order `flexpipe schedules` lists them.
const std::vector<BuiltinSchedule>& builtin_schedules();
// Looks a name up case-insensitively, ignoring '-', '_' and spaces; nullptr when unknown.
const BuiltinSchedule* find_builtin(std::string_view name);
// Looks `name` up and fills in and checks `params` (defaults for 0); throws Error for unknown names
// and impossible parameters.
const BuiltinSchedule& resolve_builtin(std::string_view name, ScheduleParams& params);
// The generator's schedule by name, the test oracle (serve library_schedule instead), after
// resolve_builtin's checks; throws Error for unknown names and impossible parameters.
Schedule make_builtin(std::string_view name, ScheduleParams params);

}  // namespace flexpipe
