// A program's parameters with their values, bounds and conditions (program_parameters).
#pragma once
// A program's parameters, their values and the ranges their `where` conditions allow: what the
// automated scheduler sweeps.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "flexpipe/lang/program.h"

namespace flexpipe {

struct ProgramParameter {
  std::string name;
  int64_t value = 0;                    // the define when given, else the default (given the earlier parameters)
  std::optional<int64_t> min;           // the tightest bounds the conditions state, the other side evaluated with
  std::optional<int64_t> max;           //   the earlier parameters' values ("where m >= p" with p = 4: min 4)
  std::vector<std::string> conditions;  // each `where`: "m % p == 0: needs m to be a multiple of p"
  bool satisfied = true;                // every condition holds at `value`
  std::vector<std::string> failures;    // the message of each condition that fails at `value`, values shown
  SourceLocation location;
};

// Throws Error on syntax and name errors (as compile_program does); a failing condition is not an
// error here, it only clears `satisfied`.
std::vector<ProgramParameter> program_parameters(const std::string& text, const std::string& origin,
                                                 const std::map<std::string, int64_t>& defines = {});

}  // namespace flexpipe
