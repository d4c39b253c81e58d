// Program text split into lines, and diagnostics rendered with the source line and a caret.
#include "source.h"

#include <algorithm>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::lang {

namespace {
constexpr size_t kShownLine = 400;  // characters of a source line echoed under a diagnostic
// Messages quote the program's own text (a string, a `where` message): printable() keeps its bytes
// off the terminal the way it does the source line's, with room for the longest message written.
constexpr size_t kShownMessage = 2000;

// Editors on Windows start UTF-8 files with a byte-order mark; it is no part of the program.
std::string_view without_byte_order_mark(std::string_view text) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  return text;
}
}  // namespace

SourceText::SourceText(std::string origin, std::string_view text)
    : origin_(std::move(origin)), text_(without_byte_order_mark(text)) {
  text = text_;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines_.emplace_back(line);
    start = end + 1;
  }
}

std::string_view SourceText::line(int number) const {
  if (number < 1 || number > static_cast<int>(lines_.size())) return {};
  return lines_[number - 1];
}

std::string format_diagnostic(const std::string& origin, const std::vector<std::string>& lines,
                              const LangDiagnostic& diagnostic) {
  const SourceLocation& at = diagnostic.location;
  const std::string message = printable(diagnostic.message, kShownMessage);
  std::string out = at.line == 0 ? fmt::format("{}: error: {}", origin, message)
                                 : fmt::format("{}:{}:{}: error: {}", origin, at.line, at.column, message);
  if (at.line >= 1 && at.line <= static_cast<int>(lines.size())) {
    // The line is shown as printable() quotes it, so that a stray control byte or NUL cannot garble
    // the terminal or cut the message; the caret is placed under the same text, and tabs stay tabs
    // under it, so it lines up in any terminal.
    const std::string& line = lines[at.line - 1];
    const std::string before = printable(std::string_view(line).substr(0, std::max(at.column - 1, 0)), kShownLine);
    std::string pad;
    for (char c : before) pad += c == '\t' ? '\t' : ' ';
    out += fmt::format("\n{:>5} | {}\n      | {}^", at.line, printable(line, kShownLine), pad);
  }
  if (!diagnostic.hint.empty()) out += fmt::format("\n  hint: {}", printable(diagnostic.hint, kShownMessage));
  return out;
}

std::string format_diagnostics(const SourceText& source, const std::vector<LangDiagnostic>& diagnostics) {
  std::string out;
  for (size_t i = 0; i < diagnostics.size() && i < kMaxPrintedErrors; ++i) {
    if (!out.empty()) out += '\n';
    out += format_diagnostic(source.origin(), source.lines(), diagnostics[i]);
  }
  if (diagnostics.size() > kMaxPrintedErrors)
    out += fmt::format("\n{}: {}", source.origin(), more_errors(diagnostics.size() - kMaxPrintedErrors));
  return out;
}

}  // namespace flexpipe::lang
