#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/schedules/library.h"

namespace flexpipe {

const LibraryProgram* find_library_program(std::string_view name) {
  const BuiltinSchedule* builtin = find_builtin(name);
  if (builtin == nullptr) return nullptr;
  for (const LibraryProgram& program : library_programs())
    if (program.name == builtin->name) return &program;
  return nullptr;
}

CompiledProgram compile_builtin(std::string_view name, ScheduleParams params) {
  const BuiltinSchedule& builtin = resolve_builtin(name, params);
  const LibraryProgram* program = find_library_program(builtin.name);
  if (program == nullptr) throw Error(fmt::format("{}: the schedule library has no program for it", builtin.name));
  std::map<std::string, int64_t> defines = {{"p", params.devices}, {"m", params.microbatches}};
  if (builtin.chunks_adjustable) defines["v"] = params.chunks;
  return compile_program(std::string(program->text), fmt::format("{}.fps", builtin.name), defines);
}

}  // namespace flexpipe
