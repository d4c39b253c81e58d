#pragma once
// The single-process reference: the whole model on one process, written with libtorch's standard
// differentiable operators and trained through the autograd engine (no hand-written backward, no
// split), micro-batch by micro-batch with gradients accumulated, then the same optimizer. A pipeline
// run is exact when its losses and parameters equal this run's.
#include <vector>

#include <ATen/core/Tensor.h>

#include "model_plan.h"
#include "optimizer.h"

namespace flexpipe::runtime {

struct ReferenceRun {
  std::vector<double> losses;                    // per step: mean over the step's micro-batches
  std::vector<std::vector<at::Tensor>> parameters;  // per node, after the last step
  std::vector<std::vector<at::Tensor>> first_gradients;  // per node, of the first step (for tests)
};

ReferenceRun train_reference(const ModelPlan& plan, int microbatches, int steps, const OptimizerConfig& optimizer);

// The loss of one micro-batch through the reference graph; parameters per node (requires_grad set by
// the caller when gradients are wanted).
at::Tensor reference_loss(const ModelPlan& plan, const std::vector<std::vector<at::Tensor>>& parameters,
                          const MicroBatchData& data);

// max |a - b| / max |b| over the elements (0 when both are zero): the per-tensor relative difference
// exactness is judged by.
double relative_difference(const at::Tensor& a, const at::Tensor& b);

}  // namespace flexpipe::runtime
