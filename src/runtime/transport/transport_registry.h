// The transports a rank can train over, by name, and the one place a job's transport is chosen.
// A new backend (NCCL) is a file of its own defining its connect function, declared in transport.h,
// and one line in transport_backends()'s table (docs/architecture.md, "Add a new transport").
#pragma once
#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include "flexpipe/train/rank_env.h"
#include "transport/transport.h"

namespace flexpipe::runtime {

struct TransportBackend {
  std::string_view name;  // as its transports' backend() says
  // Connects this rank of `env` to the job's other ranks; throws TransportError naming what it waited for.
  std::unique_ptr<Transport> (*connect)(const RankEnv& env, std::chrono::milliseconds timeout) = nullptr;
  // It moves messages on threads of its own, which should preempt the computation when ranks share
  // cores (compute_priority.h).
  bool own_threads = false;
};

// Every backend this runtime has, in the table's order.
const std::vector<TransportBackend>& transport_backends();

// The backend named `name`; throws Error naming the known ones.
const TransportBackend& transport_backend(std::string_view name);

// The backend a job of `env` trains over: the in-process one when the job is this one rank, Gloo otherwise.
std::string_view transport_for(const RankEnv& env);

}  // namespace flexpipe::runtime
