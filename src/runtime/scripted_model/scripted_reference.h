// The single-process reference for a captured model: every chunk of the export loaded into one
// process and run in order as one autograd graph per micro-batch (no pieces kept apart, no split, no
// recompute, no offload, no transfers), gradients accumulated over the step's micro-batches, then the
// same clipping, learning rate and optimizer as the pipeline. `train --verify` compares a pipelined
// run with it: what it checks is the schedule's execution, not the export (python/tests compares the
// export with PyTorch itself).
#pragma once
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "builtin_model/reference_model.h"
#include "scripted_model/scripted_model.h"
#include "scripted_model/tensor_data.h"

namespace flexpipe::runtime {

struct ScriptedReferenceRun {
  std::vector<double> losses;         // per step: mean over the step's micro-batches
  std::vector<ScriptedChunk> chunks;  // after the last step: parameters and buffers by manifest name
};

// `training.microbatches`: per step, over every data-parallel replica; `seed`: the plan's, from which
// dropout draws the executor's masks (microbatch_seed).
ScriptedReferenceRun train_scripted_reference(const ExportManifest& manifest, const TensorData& data,
                                              const ReferenceTraining& training, uint64_t seed);

// The tensor of `chunk` named `name` in the manifest (a parameter or a buffer); undefined when none.
at::Tensor scripted_tensor(const ScriptedChunk& chunk, const std::string& name);

}  // namespace flexpipe::runtime
