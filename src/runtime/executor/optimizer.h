// The optimizer step of one stage: SGD or AdamW (decoupled weight decay, bias-corrected moments, the
// update order of torch.optim.AdamW). The executor and the single-process reference use this same
// code, so that a schedule's result can be compared with the reference bit for bit up to the order
// in which gradients were summed.
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace flexpipe::runtime {

struct OptimizerConfig {
  std::string kind = "adamw";  // "sgd" or "adamw"
  double learning_rate = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
};

// Throws Error for an unknown kind or a negative rate.
void check_optimizer(const OptimizerConfig& config);

// Tensors of state the optimizer keeps per parameter tensor: AdamW's two moments, none for SGD.
int state_tensors_per_parameter(const OptimizerConfig& config);

class Optimizer {
 public:
  Optimizer(OptimizerConfig config, std::vector<at::Tensor> parameters);
  // Updates the parameters in place from `gradients` (same order and shapes), then zeroes them.
  void step(const std::vector<at::Tensor>& gradients);
  int steps_taken() const { return steps_; }
  // For learning-rate schedules: the rate of the next steps.
  void set_learning_rate(double rate) { config_.learning_rate = rate; }
  // What a checkpoint must keep to resume exactly: AdamW's moments (empty for SGD) and the step
  // count its bias correction depends on.
  std::vector<at::Tensor>& first_moments() { return first_moment_; }
  std::vector<at::Tensor>& second_moments() { return second_moment_; }
  void set_steps_taken(int steps) { steps_ = steps; }

 private:
  OptimizerConfig config_;
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> first_moment_, second_moment_;
  int steps_ = 0;
};

}  // namespace flexpipe::runtime
