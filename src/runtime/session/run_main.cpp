// The runtime library's entry points for `flexpipe run`: one rank connects to the others over the
// transport its job calls for and trains every requested schedule in its training session
// (training_session.h), rank 0 printing the reports; and the check of a request before any rank starts.
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "device/compute_priority.h"
#include "device/host_allocator.h"
#include "device/torch_device.h"
#include "executor/executor.h"
#include "flexpipe/runtime/entry.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "scripted_model/tensor_data.h"
#include "session/training_session.h"
#include "transport/transport_registry.h"

namespace flexpipe::runtime {

namespace {

int run_rank(const RunRequest& request) {
  HookRegistry hooks;
  for (const auto& [name, spec] : request.hooks) hooks.add(name, builtin_hook(spec));
  const std::chrono::milliseconds timeout(static_cast<int64_t>(request.timeout_seconds * 1000));
  const TransportBackend& backend = transport_backend(transport_for(request.env));
  const std::unique_ptr<Transport> transport = backend.connect(request.env, timeout);
  // The backend's threads, started by now, read and write the messages; when ranks share cores, a
  // message should not wait for a core behind a computation (docs/runtime.md).
  if (backend.own_threads) lower_compute_priority();
  TrainingSession session(request, *transport);
  nlohmann::json runs = nlohmann::json::array();
  bool all_verified = true, any_diverged = false;
  for (const ScheduledRun& run : request.runs) {
    RunOutcome outcome = session.train(run, hooks);
    all_verified = all_verified && outcome.verified;
    any_diverged = any_diverged || outcome.diverged;
    if (transport->rank() == 0) {
      if (!request.json) print_text(outcome.report, request.progress);
      std::fflush(stdout);
    }
    runs.push_back(to_json(outcome.report));
  }
  if (transport->rank() == 0 && request.json) fmt::print("{}\n", nlohmann::json{{"runs", runs}}.dump(2));
  return all_verified && !any_diverged ? kExitSuccess : kExitProblemsFound;
}

}  // namespace

}  // namespace flexpipe::runtime

extern "C" int flexpipe_runtime_main(const flexpipe::runtime::RunRequest* request) {
  using namespace flexpipe::runtime;
  int code = flexpipe::kExitSuccess;
  keep_freed_host_memory();
  try {
    training_device(request->device, request->env);  // fails before any rank connects
    code = run_rank(*request);
  } catch (const PeerFailure& e) {
    code = flexpipe::report_error(flexpipe::kExitFailure, e.what());  // its message names the rank already
  } catch (const TransportError& e) {
    code = flexpipe::report_error(flexpipe::kExitFailure, fmt::format("rank {}: {}", request->env.rank, e.what()));
  } catch (const std::exception& e) {
    code = flexpipe::report_exception(e, fmt::format("rank {}: ", request->env.rank));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // After a failure, c10d's destructors may wait for peers that are gone: leave without them.
  if (code != flexpipe::kExitSuccess) std::_Exit(code);
  return code;
}

extern "C" int flexpipe_runtime_check(const flexpipe::runtime::RunRequest* request) {
  using namespace flexpipe::runtime;
  try {
    training_device(request->device, request->env);
    if (request->export_dir.empty()) return flexpipe::kExitSuccess;
    const at::ScalarType dtype = request->training.dtype == "float64" ? at::kDouble : at::kFloat;
    for (const ScheduledRun& run : request->runs) {
      const ModelPlan plan = make_scripted_plan(request->captured_graph, run.partition, request->export_dir, dtype,
                                                request->training.seed);
      for (int k = 0; k < plan.num_chunks(); ++k) load_scripted_chunk(*plan.scripted, k);
      if (!request->training.data.empty()) TensorData::from_file(request->training.data, *plan.scripted);
    }
  } catch (const std::exception& e) {
    return flexpipe::report_exception(e, "");
  }
  return flexpipe::kExitSuccess;
}
