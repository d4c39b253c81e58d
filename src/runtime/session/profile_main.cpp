// The runtime library's profiling entry point (`flexpipe profile`).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "device/host_allocator.h"
#include "device/torch_device.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/runtime/entry.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "flexpipe/support/files.h"
#include "flexpipe/support/quantity.h"
#include "flexpipe/train/trainable_model.h"
#include "session/profiler.h"
#include "transport/transport_profiler.h"

namespace flexpipe::runtime {
namespace {

// Bytes per millisecond as a rate people read.
std::string rate(double bytes_per_ms) {
  return std::isfinite(bytes_per_ms) ? format_bytes(bytes_per_ms * 1e3) + "/s" : "unlimited";
}

void print_transport(const std::vector<TransportSample>& samples, const Link& link) {
  fmt::print("\ntransport: Gloo over loopback between two ranks of this machine, median of {} round trips\n",
             TransportProfileOptions{}.repeats);
  fmt::print("{:>12} {:>9} {:>11} {:>11} {:>16}\n", "bytes", "send ms", "receive ms", "one way ms", "late receive ms");
  for (const TransportSample& s : samples)
    fmt::print("{:>12.0f} {:>9.4f} {:>11.4f} {:>11.4f} {:>16.4f}\n", s.bytes, s.send, s.receive, s.one_way,
               s.late_receive);
  fmt::print(
      "link: latency {:.4f} ms, bandwidth {}; host time per message {:.4f} ms to send, {:.4f} ms to receive, "
      "copying at {}; a message sent before its receive arrives {:.4f} ms after the receive is posted\n",
      link.latency, rate(link.bandwidth), link.send_cpu, link.receive_cpu, rate(link.cpu_bandwidth), link.rendezvous);
}

int profile(const ProfileRequest& request) {
  if (request.repeats < 1 || request.warmup < 0)
    throw Error(
        fmt::format("--repeats {} must be positive and --warmup {} non-negative", request.repeats, request.warmup));
  const at::ScalarType dtype = request.dtype == "float64" ? at::kDouble : at::kFloat;
  const CostGraph analytic = trainable_graph(request.model, request.microbatch_size);
  const ModelPlan plan =
      make_model_plan(request.model, partition_balanced(analytic, 1), request.microbatch_size, dtype, request.seed);
  const c10::Device device = training_device(request.device, RankEnv{});
  CostGraph measured = profile_model(plan, {request.warmup, request.repeats, device});
  std::vector<TransportSample> transport;
  if (request.transport_port > 0) {
    double largest = 0;
    for (const TensorEdge& edge : measured.edges)
      largest = std::max(largest, edge.bytes.at(measured.reference.microbatch_size, measured.reference.seq_len));
    TransportProfileOptions options;
    options.port = request.transport_port;
    options.sizes = transport_profile_sizes(largest);
    options.dtype = dtype;
    transport = profile_transport(options);
    measured.link = fit_link(transport);
  }
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
  if (measured.link) print_transport(transport, *measured.link);
  if (!request.output.empty()) fmt::print("cost graph: {}\n", request.output);
  return kExitSuccess;
}

}  // namespace
}  // namespace flexpipe::runtime

extern "C" int flexpipe_runtime_profile(const flexpipe::runtime::ProfileRequest* request) {
  flexpipe::runtime::keep_freed_host_memory();  // the operators are timed as training runs them
  try {
    return flexpipe::runtime::profile(*request);
  } catch (const std::exception& e) {
    return flexpipe::report_exception(e);
  }
}
