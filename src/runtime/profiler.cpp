#include "profiler.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "data_source.h"

namespace flexpipe::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

template <typename F>
double time_ms(F&& f) {
  const Clock::time_point start = Clock::now();
  f();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The polynomial scaled so that it equals `measured` at the reference shape (keeps how it grows).
ShapePolynomial rescaled(const ShapePolynomial& analytic, double measured, const Shape& shape) {
  const double at = analytic.at(shape.microbatch_size, shape.seq_len);
  if (at <= 0) return measured > 0 ? per_token(measured / (shape.microbatch_size * shape.seq_len)) : ShapePolynomial{};
  return (measured / at) * analytic;
}

}  // namespace

CostGraph profile_model(const ModelPlan& plan, const ProfileOptions& options) {
  at::NoGradGuard no_grad;
  const int n = static_cast<int>(plan.graph.nodes.size());
  ChunkModule module;
  module.begin = 0;
  module.end = n;
  for (int v = 0; v < n; ++v) module.operators.push_back(make_operator(plan.graph, v, plan.shape, plan.seed, plan.dtype));
  const MicroBatchData data =
      DataSource::synthetic(plan.shape.vocab, plan.seed).microbatch(0, 0, plan.microbatch_size, plan.seq_len);
  // One forward to get every operator's inputs and output gradient of the right shape.
  std::vector<at::Tensor> values(n);
  std::vector<Saved> saved(n);
  for (int v = 0; v < n; ++v) {
    std::vector<at::Tensor> in;
    for (int p : plan.inputs[v]) in.push_back(values[p]);
    values[v] = module.op(v).forward(in, data, saved[v]);
  }
  CostGraph graph = plan.graph;
  graph.name += " (measured)";
  graph.time_unit = "ms";
  const Shape& shape = graph.reference;
  for (int v = 0; v < n; ++v) {
    Operator& op = module.op(v);
    std::vector<at::Tensor> in;
    for (int p : plan.inputs[v]) in.push_back(values[p]);
    const at::Tensor grad = at::ones_like(values[v]);
    std::vector<double> f, i, w;
    Saved probe;
    for (int r = 0; r < options.warmup + options.repeats; ++r) {
      const double tf = time_ms([&] { op.forward(in, data, probe); });
      const double ti = time_ms([&] { op.backward_input(grad, probe); });
      const double tw = op.has_parameters() ? time_ms([&] { op.backward_weight(grad, probe); }) : 0.0;
      if (r < options.warmup) continue;
      f.push_back(tf);
      i.push_back(ti);
      w.push_back(tw);
    }
    OperatorNode& node = graph.nodes[v];
    const bool quadratic = node.kind == "softmax" || node.name.ends_with(".scores");
    node.scaling = {ScalingRule::Power, 1, quadratic ? 2.0 : 1.0};
    node.forward.time = median(f);
    node.backward_input.time = median(i);
    node.backward_weight.time = median(w);
    node.saved_bytes = rescaled(node.saved_bytes, static_cast<double>(saved[v].bytes()), shape);
    // The executor frees what an operator without parameters saved when I ends; the rest at W.
    node.freed_by_input = op.has_parameters() ? ShapePolynomial{} : node.saved_bytes;
    node.output_bytes =
        rescaled(node.output_bytes, static_cast<double>(values[v].numel() * values[v].element_size()), shape);
  }
  return graph;
}

}  // namespace flexpipe::runtime
