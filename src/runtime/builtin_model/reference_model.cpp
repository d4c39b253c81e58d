// The built-in model trained in one process through autograd, the result a pipelined run must equal.
#include "builtin_model/reference_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/ATen.h>

#include "builtin_model/operator_kinds.h"

namespace flexpipe::runtime {

at::Tensor reference_loss(const ModelPlan& plan, const std::vector<std::vector<at::Tensor>>& parameters,
                          const MicroBatchData& data) {
  const CostGraph& graph = plan.graph;
  std::vector<at::Tensor> values(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const OperatorNode& node = graph.nodes[n];
    std::vector<at::Tensor> in;
    for (int producer : plan.inputs[n]) in.push_back(values[producer]);
    values[n] = operator_kind(node).reference({in, parameters[n], data, plan.shape});
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
