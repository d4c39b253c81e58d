// The schedule language's compiler: a .fps program to a Schedule with a source map.
#pragma once
// The FlexPipe schedule language (.fps, docs/language.md): compiles a program to a Schedule and
// remembers, for every action, the statement that emitted it. Locations live beside the schedule,
// never in it, so that schedules compare equal whatever program produced them.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "flexpipe/ir/schedule.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe {

struct SourceLocation {
  int line = 0;    // 1-based; 0: unknown
  int column = 0;  // 1-based
  friend bool operator==(const SourceLocation&, const SourceLocation&) = default;
};

// (device, position) -> the program line that emitted the action.
struct SourceMap {
  std::string origin;                                         // file name, or what the caller named the text
  std::vector<std::string> lines;                             // the program text, for carets
  std::vector<std::vector<SourceLocation>> device_positions;  // parallel to Schedule::device_actions
  SourceLocation at(int device, int position) const;          // {0, 0} when unknown
};

struct CompileOptions {
  int64_t max_steps = 10'000'000;  // statements and loop iterations; more is a runaway program
  bool trace = false;              // record one line per emitted action in CompiledProgram::trace
};

struct CompiledProgram {
  Schedule schedule;
  SourceMap map;
  std::string description;         // the program's `description "..."`; empty when it states none
  std::vector<std::string> trace;  // "FILE:LINE:COL: 1F3 -> device 1 #5", in emission order
};

// Throws Error whose message holds every diagnostic (file:line:col, source line, caret, hint).
// `defines` sets parameters by name, replacing their defaults; an undeclared name is an error.
CompiledProgram compile_program(const std::string& text, const std::string& origin,
                                const std::map<std::string, int64_t>& defines = {}, const CompileOptions& options = {});
CompiledProgram load_program(const std::string& path, const std::map<std::string, int64_t>& defines = {},
                             const CompileOptions& options = {});

// The validator's diagnostics, each pointing at the program line that emitted its action:
// "FILE:LINE:COL: error: device 1 #5 1F3: ..." with the source line and a caret. A diagnostic
// without a position (a missing action) keeps its text, prefixed with the file name.
std::vector<std::string> locate_diagnostics(const CompiledProgram& program, const std::vector<Diagnostic>& diagnostics);

}  // namespace flexpipe
