// The schedule language's checker: name resolution and the checks before a run (internal).
#pragma once
// Internal to the schedule language: resolves every name of a parsed program (variables to slots,
// calls to patterns or action kinds) and checks what can be checked before running it: unknown
// names, arities, declarations at the top level and once, parameters first. Reports every error.
#include <vector>

#include "ast.h"
#include "source.h"

namespace flexpipe::lang {

// Counter families of the one-argument action forms and count(K, s): B and I share one.
int counter_family(ActionKind kind, int custom);
inline constexpr int kBuiltinCounterFamilies = 11;

// The micro-batch the one-argument form K(s) names: the first after `last` (the last one K's counter
// family named at s; -1: none yet) that runs in s's pipeline, or `limit` when none is left. The
// interpreter resolves K(s) with it and the writer decides with it when K(s) may stand for K(s, mb).
template <class PipelineOf>
int next_microbatch(int last, int limit, int pipeline, PipelineOf pipeline_of) {
  int mb = last + 1;
  while (mb < limit && pipeline_of(mb) != pipeline) ++mb;
  return mb;
}

// Maps a built-in kind name ("F", "SEND_F", ...) to its kind; false for any other name.
bool builtin_kind(const std::string& name, ActionKind& kind);

void check(Program& program, std::vector<LangDiagnostic>& diagnostics);

// The front end every entry point shares: tokenizes, parses and, when there is no syntax error,
// checks (name errors after syntax errors would mostly echo them). Appends every diagnostic; the
// program is only usable when none were appended.
Program parse_and_check(const SourceText& source, std::vector<LangDiagnostic>& diagnostics);

}  // namespace flexpipe::lang
