// The schedule library: built-in names compiled from their embedded programs, and kept per parameters.
#include "flexpipe/schedules/library.h"

#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

const LibraryProgram* find_library_program(std::string_view name) {
  const BuiltinSchedule* builtin = find_builtin(name);
  if (builtin == nullptr) return nullptr;
  for (const LibraryProgram& program : library_programs())
    if (program.name == builtin->name) return &program;
  return nullptr;
}

CompiledProgram compile_builtin(std::string_view name, ScheduleParams params,
                                const std::map<std::string, int64_t>& extra_defines) {
  const BuiltinSchedule& builtin = resolve_builtin(name, params);
  const LibraryProgram* program = find_library_program(builtin.name);
  if (program == nullptr) throw Error(fmt::format("{}: the schedule library has no program for it", builtin.name));
  for (const char* shape : {"p", "m", "v"})
    if (extra_defines.contains(shape))
      throw Error(
          fmt::format("{}: {} is set by the schedule's parameters, not as another define", builtin.name, shape));
  std::map<std::string, int64_t> defines = extra_defines;
  defines["p"] = params.devices;
  defines["m"] = params.microbatches;
  if (builtin.chunks_adjustable) defines["v"] = params.chunks;
  // The library's programs are ours and tested: the step limit guards against runaway user programs,
  // and zb-v-adaptive's construction, which simulates as it places, takes on the order of 1000 p m.
  CompileOptions options;
  options.max_steps = kLibraryStepLimit;
  return compile_program(std::string(program->text), fmt::format("{}.fps", builtin.name), defines, options);
}

Schedule library_schedule(std::string_view name, ScheduleParams params) {
  using Key = std::tuple<std::string, int, int, int>;
  static std::mutex mutex;
  static std::map<Key, Schedule> compiled;
  // Looked up as asked before resolve_builtin, which reads the program's parameters: the search asks
  // for the same few built-ins again and again. Only parameters that passed the checks are kept.
  const BuiltinSchedule* known = find_builtin(name);
  Key asked{known != nullptr ? known->name : std::string(name), params.devices, params.microbatches,
            params.chunks != 0 || known == nullptr ? params.chunks : known->default_chunks};
  {
    std::lock_guard lock(mutex);
    if (auto found = compiled.find(asked); found != compiled.end()) return found->second;
  }
  const BuiltinSchedule& builtin = resolve_builtin(name, params);  // defaults filled: m = 0 and m = 2p share a key
  Key key{builtin.name, params.devices, params.microbatches, params.chunks};
  {
    std::lock_guard lock(mutex);
    if (auto found = compiled.find(key); found != compiled.end())
      return compiled.try_emplace(std::move(asked), found->second).first->second;
  }
  // Compiled outside the lock: two workers may both compile a new key, and the first to finish is kept.
  Schedule schedule = compile_builtin(builtin.name, params).schedule;
  std::lock_guard lock(mutex);
  const Schedule& kept = compiled.try_emplace(std::move(key), std::move(schedule)).first->second;
  return compiled.try_emplace(std::move(asked), kept).first->second;
}

}  // namespace flexpipe
