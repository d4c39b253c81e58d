#include "source.h"

#include <fmt/format.h>

namespace flexpipe::lang {

SourceText::SourceText(std::string origin, std::string_view text) : origin_(std::move(origin)), text_(text) {
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
  std::string out = at.line == 0 ? fmt::format("{}: error: {}", origin, diagnostic.message)
                                 : fmt::format("{}:{}:{}: error: {}", origin, at.line, at.column, diagnostic.message);
  if (at.line >= 1 && at.line <= static_cast<int>(lines.size())) {
    const std::string& line = lines[at.line - 1];
    // Tabs stay tabs under the caret, so it lines up in any terminal.
    std::string pad;
    for (int i = 0; i + 1 < at.column && i < static_cast<int>(line.size()); ++i) pad += line[i] == '\t' ? '\t' : ' ';
    out += fmt::format("\n{:>5} | {}\n      | {}^", at.line, line, pad);
  }
  if (!diagnostic.hint.empty()) out += fmt::format("\n  hint: {}", diagnostic.hint);
  return out;
}

std::string format_diagnostics(const SourceText& source, const std::vector<LangDiagnostic>& diagnostics) {
  std::string out;
  for (const LangDiagnostic& d : diagnostics) {
    if (!out.empty()) out += '\n';
    out += format_diagnostic(source.origin(), source.lines(), d);
  }
  return out;
}

}  // namespace flexpipe::lang
