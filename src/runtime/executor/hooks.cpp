// The registry of custom operations' C++ hooks and the built-in hooks a run request names.
#include "executor/hooks.h"

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

std::vector<std::string> HookRegistry::names() const {
  std::vector<std::string> names;
  for (const auto& [name, hook] : hooks_) names.push_back(name);
  return names;
}

Hook builtin_hook(const std::string& spec) {
  if (spec == "noop") return [](const HookContext&) {};
  if (spec == "log")
    return [](const HookContext& c) {
      fmt::print(stderr, "rank {}: step {} {} stage {} micro-batch {}\n", c.rank, c.step, c.operation, c.stage,
                 c.microbatch);
    };
  if (spec.rfind("sleep:", 0) == 0) {
    size_t used = 0;
    double ms = -1;
    try {
      ms = std::stod(spec.substr(6), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != spec.size() - 6 || !(ms >= 0))
      throw Error(fmt::format("hook '{}': sleep takes a non-negative number of milliseconds", spec));
    return [ms](const HookContext&) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); };
  }
  throw Error(fmt::format("hook '{}': use noop, log or sleep:MS", spec));
}

}  // namespace flexpipe::runtime
