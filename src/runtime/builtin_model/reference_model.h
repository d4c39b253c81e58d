// The single-process reference: the whole model on one process, written with libtorch's standard
// differentiable operators and trained through the autograd engine (no hand-written backward, no
// split), micro-batch by micro-batch with gradients accumulated, then the same optimizer. A pipeline
// run is exact when its losses and parameters equal this run's.
#pragma once
#include <vector>

#include <ATen/core/Tensor.h>

#include <optional>

#include "builtin_model/data_source.h"
#include "executor/model_plan.h"
#include "executor/optimizer.h"
#include "flexpipe/train/lr_schedule.h"

namespace flexpipe::runtime {

struct ReferenceRun {
  std::vector<double> losses;                            // per step: mean over the step's micro-batches
  std::vector<std::vector<at::Tensor>> parameters;       // per node, after the last step
  std::vector<std::vector<at::Tensor>> first_gradients;  // per node, of the first step (for tests)
};

struct ReferenceTraining {
  int microbatches = 1;  // per step, over all data-parallel replicas
  int steps = 1;
  OptimizerConfig optimizer;
  std::optional<LrSchedule> learning_rate;  // none: the optimizer's constant rate
  double max_grad_norm = 0;                 // clip by the global norm; 0: never
};

ReferenceRun train_reference(const ModelPlan& plan, const DataSource& data, const ReferenceTraining& training);
// Synthetic data of the plan's vocabulary and seed, constant learning rate, no clipping.
ReferenceRun train_reference(const ModelPlan& plan, int microbatches, int steps, const OptimizerConfig& optimizer);

// The end of a reference step, as the pipeline ends one: the gradients clipped by their global norm
// (when the training clips), the step's learning rate, the optimizer's step.
void finish_reference_step(const ReferenceTraining& training, int step, Optimizer& optimizer,
                           const std::vector<at::Tensor>& gradients);

// The loss of one micro-batch through the reference graph; parameters per node (requires_grad set by
// the caller when gradients are wanted).
at::Tensor reference_loss(const ModelPlan& plan, const std::vector<std::vector<at::Tensor>>& parameters,
                          const MicroBatchData& data);

// max |a - b| / max |b| over the elements (0 when both are zero): the per-tensor relative difference
// exactness is judged by.
double relative_difference(const at::Tensor& a, const at::Tensor& b);

}  // namespace flexpipe::runtime
