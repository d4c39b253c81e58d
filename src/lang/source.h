// Program text with its origin, and located diagnostics (internal to the schedule language).
#pragma once
// Internal to the schedule language: program text with its origin, and located diagnostics
// rendered as "FILE:LINE:COL: error: MESSAGE", the source line, a caret and a hint.
#include <string>
#include <string_view>
#include <vector>

#include "flexpipe/lang/program.h"

namespace flexpipe::lang {

class SourceText {
 public:
  SourceText(std::string origin, std::string_view text);
  const std::string& origin() const { return origin_; }
  std::string_view text() const { return text_; }
  const std::vector<std::string>& lines() const { return lines_; }
  std::string_view line(int number) const;  // 1-based; empty when out of range

 private:
  std::string origin_;
  std::string_view text_;
  std::vector<std::string> lines_;
};

struct LangDiagnostic {
  SourceLocation location;
  std::string message;
  std::string hint;  // empty: none
};

// One diagnostic: the header line, then the source line with a caret under the column, then the hint.
std::string format_diagnostic(const std::string& origin, const std::vector<std::string>& lines,
                              const LangDiagnostic& diagnostic);
// Every diagnostic, separated by newlines: the message of the Error a failed compile throws.
std::string format_diagnostics(const SourceText& source, const std::vector<LangDiagnostic>& diagnostics);

// Thrown while a program runs; stops the run, and becomes one diagnostic.
struct RunError {
  SourceLocation location;
  std::string message;
  std::string hint;
};

}  // namespace flexpipe::lang
