// The table of transport backends by name, and the choice of one for a job.
#include "transport/transport_registry.h"

#include <string>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

const std::vector<TransportBackend>& transport_backends() {
  static const std::vector<TransportBackend> backends = {
      {"gloo", connect_gloo, true},
      {"local", connect_local, false},
  };
  return backends;
}

const TransportBackend& transport_backend(std::string_view name) {
  std::string known;
  for (const TransportBackend& backend : transport_backends()) {
    if (backend.name == name) return backend;
    known += (known.empty() ? "" : ", ") + std::string(backend.name);
  }
  throw Error(fmt::format("unknown transport '{}' (known: {})", name, known));
}

std::string_view transport_for(const RankEnv& env) { return env.world_size == 1 ? "local" : "gloo"; }

}  // namespace flexpipe::runtime
