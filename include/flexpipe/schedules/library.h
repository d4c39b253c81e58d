// The schedule library: built-in names compiled from their embedded programs (compile_builtin).
#pragma once
// Every built-in schedule is a program of the language (examples/schedules/NAME.fps, compiled into
// the binary). Built-in names are served from these programs, to the CLI, load_schedule and the
// search alike, after the catalog's parameter checks (builtin.h, read from the same programs); the
// C++ generators are the oracle the programs are tested against, never what a caller is served.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "flexpipe/lang/program.h"
#include "flexpipe/schedules/builtin.h"

namespace flexpipe {

struct LibraryProgram {
  std::string_view name;  // the built-in's canonical name, e.g. "zb-h1"
  std::string_view text;  // the program
};

const std::vector<LibraryProgram>& library_programs();
const LibraryProgram* find_library_program(std::string_view name);

// The step limit (CompileOptions::max_steps) library programs are compiled with: well above a user
// program's default, since zb-v-adaptive.fps places passes in simulated time (on the order of
// 1000 p m steps: p = 64, m = 1024 compiles in a few seconds).
inline constexpr int64_t kLibraryStepLimit = 1'000'000'000;

// The built-in `name` compiled from its library program with p, m (and v where the schedule takes
// it), after the same parameter checks and messages as make_builtin. Throws Error for unknown names
// and impossible parameters.
// `defines` sets the program's other parameters by name (zb-v-adaptive's tf, ti, tw, comm, mem), as -D
// does for a program file; p, m and v come from `params` only.
CompiledProgram compile_builtin(std::string_view name, ScheduleParams params,
                                const std::map<std::string, int64_t>& defines = {});

// compile_builtin's schedule, compiled once per (name, p, m, v) and kept for the process's life, for
// callers that ask for the same built-ins again and again (the search's workers; thread-safe).
// Throws Error like compile_builtin.
Schedule library_schedule(std::string_view name, ScheduleParams params);

}  // namespace flexpipe
