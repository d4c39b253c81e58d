// The runtime (libtorch + c10d) is a shared library loaded only by the subcommands that train, so
// that every other subcommand starts in milliseconds and builds without libtorch.
#pragma once
#include "flexpipe/runtime/run_request.h"
#include "flexpipe/runtime/runtime_facts.h"

namespace flexpipe {

// Loads libflexpipe_runtime.so (from $FLEXPIPE_RUNTIME_LIBRARY, else next to this executable) and
// runs this rank's part of the request; returns its exit code. Throws Error when it cannot be loaded.
int run_runtime(const runtime::RunRequest& request);
// What only the runtime can check before any rank starts (a captured model's export and data): 0, or
// the exit code after one error line.
int check_runtime_request(const runtime::RunRequest& request);
// Likewise for `flexpipe profile`.
int profile_runtime(const runtime::ProfileRequest& request);
// The runtime's libtorch and the GPUs it sees (`flexpipe version`); throws Error when it cannot be loaded.
runtime::RuntimeFacts runtime_facts();

}  // namespace flexpipe
