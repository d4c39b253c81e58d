// The built-in model trained in one process through autograd, the result a pipelined run must equal.
#include "builtin_model/reference_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/ATen.h>

namespace flexpipe::runtime {

namespace {

// Q, K or V of the fused projection (or Q, K of the rotated one) as [b, heads, s, head_dim]; a
// key/value head repeated for each query head of its group.
at::Tensor head_part(const at::Tensor& fused, int which, const OperatorShape& shape) {
  const int64_t b = fused.size(0), s = fused.size(1), d = shape.head_dim();
  const int64_t count = which == 0 ? shape.heads : shape.kv_heads;
  const int64_t offset = which == 0 ? 0 : which == 1 ? shape.heads * d : (shape.heads + shape.kv_heads) * d;
  const at::Tensor x = fused.narrow(2, offset, count * d).reshape({b, s, count, d}).transpose(1, 2);
  return x.repeat_interleave(shape.heads / count, 1);
}

// Llama's rotary positions on a [b, s, n, d] tensor: x cos + rotate_half(x) sin.
at::Tensor rotary(const at::Tensor& x, double base) {
  const int64_t s = x.size(1), d = x.size(3);
  const at::Tensor inverse = 1.0 / at::pow(base, at::arange(0, d, 2, x.options()) / double(d));
  const at::Tensor angles = at::outer(at::arange(s, x.options()), inverse);
  const at::Tensor both = at::cat({angles, angles}, -1).unsqueeze(1);
  const at::Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
  return x * both.cos() + at::cat({-x2, x1}, -1) * both.sin();
}

}  // namespace

at::Tensor reference_loss(const ModelPlan& plan, const std::vector<std::vector<at::Tensor>>& parameters,
                          const MicroBatchData& data) {
  const CostGraph& graph = plan.graph;
  const int64_t b = data.tokens.size(0), s = data.tokens.size(1);
  const OperatorShape& shape = plan.shape;
  std::vector<at::Tensor> values(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const OperatorNode& node = graph.nodes[n];
    const std::vector<at::Tensor>& p = parameters[n];
    std::vector<at::Tensor> in;
    for (int producer : plan.inputs[n]) in.push_back(values[producer]);
    at::Tensor& out = values[n];
    if (node.kind == "embedding") {
      out = node.name.ends_with(".position")
                ? at::embedding(p[0], at::arange(s, data.tokens.options())).unsqueeze(0).expand({b, s, p[0].size(1)})
                : at::embedding(p[0], data.tokens);
    } else if (node.kind == "add") {
      out = in[0];
      for (size_t i = 1; i < in.size(); ++i) out = out + in[i];
    } else if (node.kind == "layernorm") {
      out = at::layer_norm(in[0], {p[0].size(0)}, p[0], p[1], 1e-5);
    } else if (node.kind == "rmsnorm") {
      out = in[0] * at::rsqrt(in[0].pow(2).mean(-1, true) + 1e-5) * p[0];
    } else if (node.kind == "rope") {
      const int64_t width = (shape.heads + shape.kv_heads) * shape.head_dim();
      out = rotary(in[0].slice(2, 0, width).reshape({b, s, -1, shape.head_dim()}), shape.rotary_base)
                .reshape({b, s, width});
    } else if (node.kind == "swiglu") {
      const at::Tensor halves[2] = {in[0].slice(-1, 0, in[0].size(-1) / 2), in[0].slice(-1, in[0].size(-1) / 2)};
      out = at::silu(halves[0]) * halves[1];
    } else if (node.kind == "linear") {
      out = at::linear(in[0], p[0], p.size() > 1 ? c10::optional<at::Tensor>(p[1]) : c10::nullopt);
    } else if (node.name.ends_with(".scores")) {
      const at::Tensor q = head_part(in[0], 0, shape), k = head_part(in[0], 1, shape);
      const at::Tensor mask = at::ones({s, s}, data.tokens.options().dtype(at::kBool)).triu(1);
      out = (at::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1))))
                .masked_fill(mask, -std::numeric_limits<double>::infinity());
    } else if (node.kind == "softmax") {
      out = at::softmax(in[0], -1);
    } else if (node.name.ends_with(".attention_v")) {
      out =
          at::matmul(in[0], head_part(in[1], 2, shape)).transpose(1, 2).reshape({b, s, shape.heads * shape.head_dim()});
    } else if (node.kind == "gelu") {
      out = at::gelu(in[0]);
    } else if (node.kind == "cross_entropy") {
      out = at::cross_entropy_loss(in[0].reshape({-1, in[0].size(-1)}), data.targets.reshape({-1}));
    }
  }
  return values.back();
}

ReferenceRun train_reference(const ModelPlan& plan, int microbatches, int steps, const OptimizerConfig& optimizer) {
  ReferenceTraining training;
  training.microbatches = microbatches;
  training.steps = steps;
  training.optimizer = optimizer;
  return train_reference(plan, DataSource::synthetic(plan.shape.vocab, plan.seed), training);
}

ReferenceRun train_reference(const ModelPlan& plan, const DataSource& data, const ReferenceTraining& training) {
  const int microbatches = training.microbatches;
  ReferenceRun run;
  std::vector<std::vector<at::Tensor>> parameters;
  std::vector<at::Tensor> flat;
  for (size_t n = 0; n < plan.graph.nodes.size(); ++n) {
    parameters.push_back(initial_parameters(plan.graph, static_cast<int>(n), plan.shape, plan.seed, plan.dtype));
    for (at::Tensor& p : parameters.back()) {
      p.requires_grad_(true);
      flat.push_back(p);
    }
  }
  Optimizer optimizer(training.optimizer, flat);
  for (int step = 0; step < training.steps; ++step) {
    double loss = 0;
    for (const MicroBatchData& mb : data.batch(step, 0, microbatches, plan.microbatch_size, plan.seq_len)) {
      const at::Tensor mb_loss = reference_loss(plan, parameters, mb) / microbatches;
      mb_loss.backward();
      loss += mb_loss.item<double>();
    }
    run.losses.push_back(loss);
    std::vector<at::Tensor> gradients;
    for (at::Tensor& p : flat) gradients.push_back(p.grad());
    if (step == 0)
      for (const auto& node_params : parameters) {
        run.first_gradients.emplace_back();
        for (const at::Tensor& p : node_params) run.first_gradients.back().push_back(p.grad().clone());
      }
    finish_reference_step(training, step, optimizer, gradients);
  }
  for (const auto& node_params : parameters) {
    run.parameters.emplace_back();
    for (const at::Tensor& p : node_params) run.parameters.back().push_back(p.detach().clone());
  }
  return run;
}

void finish_reference_step(const ReferenceTraining& training, int step, Optimizer& optimizer,
                           const std::vector<at::Tensor>& gradients) {
  if (training.max_grad_norm > 0) {
    double squares = 0;
    for (const at::Tensor& g : gradients) squares += g.to(at::kDouble).pow(2).sum().item<double>();
    const double coefficient = std::min(1.0, training.max_grad_norm / (std::sqrt(squares) + 1e-6));
    for (const at::Tensor& g : gradients) g.mul_(coefficient);
  }
  if (training.learning_rate) optimizer.set_learning_rate(learning_rate(*training.learning_rate, step));
  optimizer.step(gradients);
}

double relative_difference(const at::Tensor& a, const at::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a.to(b.device()) - b).abs().max().item<double>();
  if (scale == 0) return diff == 0 ? 0 : std::numeric_limits<double>::infinity();
  return diff / scale;
}

}  // namespace flexpipe::runtime
