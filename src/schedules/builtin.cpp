#include "flexpipe/schedules/builtin.h"

#include <cctype>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "generators/generators.h"

namespace flexpipe {

namespace {
std::string normalize(std::string_view name) {
  std::string key;
  for (char c : name)
    if (c != '-' && c != '_' && c != ' ') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return key;
}
}  // namespace

const std::vector<BuiltinSchedule>& builtin_schedules() {
  static const std::vector<BuiltinSchedule> registry = [] {
    std::vector<BuiltinSchedule> r;
    detail::register_1f1b_family(r);
    detail::register_v_family(r);
    return r;
  }();
  return registry;
}

const BuiltinSchedule* find_builtin(std::string_view name) {
  const std::string key = normalize(name);
  for (const auto& s : builtin_schedules())
    if (normalize(s.name) == key) return &s;
  return nullptr;
}

const BuiltinSchedule& resolve_builtin(std::string_view name, ScheduleParams& params) {
  const BuiltinSchedule* builtin = find_builtin(name);
  if (builtin == nullptr) {
    std::string known;
    for (const auto& s : builtin_schedules()) known += (known.empty() ? "" : ", ") + s.name;
    throw Error(fmt::format("unknown schedule '{}' (built-in schedules: {})", name, known));
  }
  if (params.devices <= 0)
    throw Error(fmt::format("{}: needs at least 1 device (got p={})", builtin->name, params.devices));
  if (params.chunks == 0) params.chunks = builtin->default_chunks;
  if (!builtin->chunks_adjustable && params.chunks != builtin->default_chunks)
    throw Error(fmt::format("{}: has exactly {} chunk{} per device (got v={})", builtin->name, builtin->default_chunks,
                            builtin->default_chunks == 1 ? "" : "s", params.chunks));
  if (params.chunks <= 0) throw Error(fmt::format("{}: needs v >= 1 (got v={})", builtin->name, params.chunks));
  if (params.microbatches == 0) params.microbatches = 2 * params.devices;
  if (params.microbatches < 0)
    throw Error(fmt::format("{}: needs m >= 1 (got m={})", builtin->name, params.microbatches));
  if (std::string why = builtin->check(params); !why.empty())
    throw Error(fmt::format("{} with p={}, m={}, v={}: {}", builtin->name, params.devices, params.microbatches,
                            params.chunks, why));
  return *builtin;
}

Schedule make_builtin(std::string_view name, ScheduleParams params) {
  const BuiltinSchedule& builtin = resolve_builtin(name, params);
  return builtin.build(params);
}

}  // namespace flexpipe
