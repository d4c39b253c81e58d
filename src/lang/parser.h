// The schedule language's parser: tokens to a syntax tree (internal).
#pragma once
// Internal to the schedule language: tokens to a syntax tree. Reports every syntax error: after
// one it resumes at the next statement on a later line.
#include <vector>

#include "ast.h"
#include "lexer.h"

namespace flexpipe::lang {

Program parse(const std::vector<Token>& tokens, std::vector<LangDiagnostic>& diagnostics);

// Names the language reserves; none can name a variable, parameter or pattern.
bool is_reserved(const std::string& name);

}  // namespace flexpipe::lang
