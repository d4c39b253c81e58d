// Custom operation kinds (declared with `op NAME { ... }` in a schedule program) run registered C++
// hooks, looked up by the operation's name when the executor is built: a schedule that names an
// operation with no hook is rejected before any communication starts.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace flexpipe::runtime {

struct HookContext {
  const std::string& operation;
  int rank = 0;
  int step = 0;
  int stage = 0;
  int microbatch = -1;  // -1: a stage-wide operation
};
using Hook = std::function<void(const HookContext&)>;

class HookRegistry {
 public:
  void add(const std::string& name, Hook hook) { hooks_[name] = std::move(hook); }
  const Hook* find(const std::string& name) const {
    auto it = hooks_.find(name);
    return it == hooks_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const;

 private:
  std::map<std::string, Hook> hooks_;
};

// A hook from its command-line spec: "noop", "log" (one line per call on stderr), "sleep:MS"
// (stands in for work of a known duration). Throws Error for anything else.
Hook builtin_hook(const std::string& spec);

}  // namespace flexpipe::runtime
