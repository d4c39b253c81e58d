// compile_program and load_program: the front end, the interpreter, and located diagnostics.
#include "flexpipe/lang/program.h"

#include <fmt/format.h>

#include "checker.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "interpreter.h"

namespace flexpipe {

SourceLocation SourceMap::at(int device, int position) const {
  if (device < 0 || device >= static_cast<int>(device_positions.size())) return {};
  const auto& positions = device_positions[device];
  if (position < 0 || position >= static_cast<int>(positions.size())) return {};
  return positions[position];
}

CompiledProgram compile_program(const std::string& text, const std::string& origin,
                                const std::map<std::string, int64_t>& defines, const CompileOptions& options) {
  using namespace lang;
  const SourceText source(origin, text);
  std::vector<LangDiagnostic> diagnostics;
  const Program program = parse_and_check(source, diagnostics);
  CompiledProgram compiled;
  if (diagnostics.empty()) compiled = run_program(program, source, defines, options, diagnostics);
  if (!diagnostics.empty()) throw Error(format_diagnostics(source, diagnostics));
  return compiled;
}

CompiledProgram load_program(const std::string& path, const std::map<std::string, int64_t>& defines,
                             const CompileOptions& options) {
  return compile_program(read_text_file(path), path, defines, options);
}

std::vector<std::string> locate_diagnostics(const CompiledProgram& program,
                                            const std::vector<Diagnostic>& diagnostics) {
  std::vector<std::string> out;
  for (const Diagnostic& d : diagnostics) {
    const SourceLocation at = program.map.at(d.device, d.position);
    if (at.line == 0) {
      out.push_back(fmt::format("{}: error: {}", program.map.origin, d.to_string()));
      continue;
    }
    out.push_back(lang::format_diagnostic(program.map.origin, program.map.lines, {at, d.to_string(), {}}));
  }
  return out;
}

}  // namespace flexpipe
