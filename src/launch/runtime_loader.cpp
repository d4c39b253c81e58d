// Loading the runtime (libflexpipe_runtime.so) with dlopen and calling its entry points.
#include "flexpipe/launch/runtime_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe {

namespace {

std::string library_path() {
  if (const char* path = std::getenv("FLEXPIPE_RUNTIME_LIBRARY"); path != nullptr && *path != '\0') return path;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  return ((error ? std::filesystem::path(".") : self.parent_path()) / "libflexpipe_runtime.so").string();
}

template <typename Request>
int call(const char* symbol, Request& request) {
  const std::string path = library_path();
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr)
    throw Error(
        fmt::format("cannot load the runtime library {}: {}\n(the runtime is built when FLEXPIPE_RUNTIME is ON, "
                    "against the torch of the Python environment scripts/setup.sh makes)",
                    path, dlerror()));
  using Entry = int (*)(Request*);
  auto entry = reinterpret_cast<Entry>(dlsym(library, symbol));
  if (entry == nullptr) throw Error(fmt::format("{} has no {}: {}", path, symbol, dlerror()));
  // Never unloaded: libtorch does not support being unloaded.
  return entry(&request);
}

}  // namespace

int run_runtime(const runtime::RunRequest& request) { return call("flexpipe_runtime_main", request); }

int profile_runtime(const runtime::ProfileRequest& request) { return call("flexpipe_runtime_profile", request); }

int check_runtime_request(const runtime::RunRequest& request) { return call("flexpipe_runtime_check", request); }

runtime::RuntimeFacts runtime_facts() {
  runtime::RuntimeFacts facts;
  call("flexpipe_runtime_facts", facts);
  return facts;
}

}  // namespace flexpipe
