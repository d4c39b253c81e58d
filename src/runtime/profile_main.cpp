// The runtime library's profiling entry point (`flexpipe profile`).
#include <cstdio>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/runtime/entry.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "flexpipe/support/files.h"
#include "flexpipe/train/trainable_model.h"
#include "profiler.h"

namespace flexpipe::runtime {
namespace {

int profile(const ProfileRequest& request) {
  if (request.repeats < 1 || request.warmup < 0)
    throw Error(
        fmt::format("--repeats {} must be positive and --warmup {} non-negative", request.repeats, request.warmup));
  const at::ScalarType dtype = request.dtype == "float64" ? at::kDouble : at::kFloat;
  const CostGraph analytic = trainable_graph(request.model, request.microbatch_size);
  const ModelPlan plan =
      make_model_plan(request.model, partition_balanced(analytic, 1), request.microbatch_size, dtype, request.seed);
  const CostGraph measured = profile_model(plan, {request.warmup, request.repeats});
  if (!request.output.empty()) write_text_file(request.output, cost_graph_to_json(measured));
  if (request.quiet) return kExitSuccess;
  if (request.json) {
    fmt::print("{}\n", cost_graph_to_json(measured));
    return kExitSuccess;
  }
  fmt::print("{}: {} operators, micro-batch {} x {} tokens, median of {} after {} warm-up runs\n", measured.name,
             measured.nodes.size(), request.microbatch_size, request.model.seq_len, request.repeats, request.warmup);
  // Units in the headers, as `flexpipe model show` has them: times in ms, sizes in bytes.
  fmt::print("{:<24} {:>9} {:>9} {:>9} {:>12} {:>15}\n", "operator", "F ms", "I ms", "W ms", "saved bytes",
             "workspace bytes");
  double f = 0, i = 0, w = 0;
  for (const OperatorNode& n : measured.nodes) {
    const Shape& at = measured.reference;
    fmt::print("{:<24} {:>9.4f} {:>9.4f} {:>9.4f} {:>12.0f} {:>15.0f}\n", n.name, n.forward.time, n.backward_input.time,
               n.backward_weight.time, n.saved_bytes.at(at.microbatch_size, at.seq_len),
               n.workspace_bytes.at(at.microbatch_size, at.seq_len));
    f += n.forward.time;
    i += n.backward_input.time;
    w += n.backward_weight.time;
  }
  fmt::print("{:<24} {:>9.4f} {:>9.4f} {:>9.4f}\n", "total", f, i, w);
  if (!request.output.empty()) fmt::print("cost graph: {}\n", request.output);
  return kExitSuccess;
}

}  // namespace
}  // namespace flexpipe::runtime

extern "C" int flexpipe_runtime_profile(const flexpipe::runtime::ProfileRequest* request) {
  try {
    return flexpipe::runtime::profile(*request);
  } catch (const std::exception& e) {
    return flexpipe::report_exception(e);
  }
}
