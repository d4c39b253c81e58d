// The schedule language's interpreter: a checked program run into a schedule (internal).
#pragma once
// Internal to the schedule language: runs a checked program and builds its schedule, recording
// the statement behind every action.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ast.h"
#include "flexpipe/lang/program.h"

namespace flexpipe::lang {

struct ParameterValues {
  std::vector<int64_t> slots;                           // the frame, with every parameter's slot set
  std::vector<std::pair<const Stmt*, int64_t>> values;  // in declaration order
};

// The parameters after `defines` and the defaults. Appends a diagnostic for every unknown define,
// every failing `where` condition and every error while evaluating them.
ParameterValues evaluate_parameters(const Program& program, const std::map<std::string, int64_t>& defines,
                                    std::vector<LangDiagnostic>& diagnostics);

// Evaluates an expression of parameters only (no count, no device); throws RunError.
int64_t evaluate_constant(const Expr& expr, std::vector<int64_t>& slots);

// A `where` message with its `{EXPR}` values evaluated (parameters only); throws RunError.
std::string where_message(const Where& where, std::vector<int64_t>& slots);

// Runs the whole program. Appends diagnostics (and returns an incomplete result) when it fails.
CompiledProgram run_program(const Program& program, const SourceText& source,
                            const std::map<std::string, int64_t>& defines, const CompileOptions& options,
                            std::vector<LangDiagnostic>& diagnostics);

}  // namespace flexpipe::lang
