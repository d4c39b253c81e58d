// The optimizer step of one stage's parameters: SGD or AdamW, as torch.optim computes them.
#include "executor/optimizer.h"

#include <cmath>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

void check_optimizer(const OptimizerConfig& c) {
  if (c.kind != "sgd" && c.kind != "adamw") throw Error(fmt::format("optimizer '{}': use sgd or adamw", c.kind));
  if (!(c.learning_rate >= 0) || !(c.weight_decay >= 0))
    throw Error(fmt::format("optimizer: learning rate {} and weight decay {} must be non-negative", c.learning_rate,
                            c.weight_decay));
}

int state_tensors_per_parameter(const OptimizerConfig& config) { return config.kind == "adamw" ? 2 : 0; }

Optimizer::Optimizer(OptimizerConfig config, std::vector<at::Tensor> parameters)
    : config_(std::move(config)), parameters_(std::move(parameters)) {
  check_optimizer(config_);
  if (state_tensors_per_parameter(config_) > 0)
    for (const at::Tensor& p : parameters_) {
      first_moment_.push_back(at::zeros_like(p));
      second_moment_.push_back(at::zeros_like(p));
    }
}

void Optimizer::step(const std::vector<at::Tensor>& gradients) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double lr = config_.learning_rate;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor& p = parameters_[i];
    const at::Tensor& g = gradients[i];
    if (config_.kind == "sgd") {
      if (config_.weight_decay > 0) p.mul_(1 - lr * config_.weight_decay);
      p.add_(g, -lr);
    } else {
      p.mul_(1 - lr * config_.weight_decay);
      first_moment_[i].mul_(config_.beta1).add_(g, 1 - config_.beta1);
      second_moment_[i].mul_(config_.beta2).addcmul_(g, g, 1 - config_.beta2);
      const double correction1 = 1 - std::pow(config_.beta1, steps_);
      const double correction2 = 1 - std::pow(config_.beta2, steps_);
      const at::Tensor denominator = (second_moment_[i].sqrt() / std::sqrt(correction2)).add_(config_.epsilon);
      p.addcdiv_(first_moment_[i], denominator, -lr / correction1);
    }
    g.zero_();
  }
}

}  // namespace flexpipe::runtime
