// The data a captured model trains on: the user's tensors (`--data FILE.pt`, a dict saved with
// torch.save: {"inputs": Tensor or list of Tensors, "targets": Tensor}, samples along dimension 0), or
// synthetic tensors of the example inputs' shapes. Every micro-batch is a pure function of (step,
// global micro-batch index), as for the token data (data_source.h), so that every rank, replica and
// resumed run sees the same samples.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "builtin_model/operators.h"
#include "scripted_model/scripted_model.h"

namespace flexpipe::runtime {

class TensorData {
 public:
  // Normal floats and integers 0 and 1 for the inputs (as `flexpipe capture` draws its examples);
  // targets: class indices below the output's last size for cross-entropy, normal floats for mse.
  static TensorData synthetic(const ExportManifest& manifest, uint64_t seed);
  // Throws Error naming the file when it is not such a dict, or when its tensors' shapes past
  // dimension 0, their number or their kinds (floating or integer) do not match the model's inputs.
  static TensorData from_file(const std::string& path, const ExportManifest& manifest);

  const std::string& description() const { return description_; }
  // Micro-batches first .. first + count - 1 of step `step` when a step has `per_step` of them: step
  // k takes samples [kB, (k+1)B) cyclically, B = per_step x the micro-batch size, in consecutive
  // micro-batches.
  std::vector<MicroBatchData> batch(int step, int first, int count, int per_step) const;

 private:
  std::vector<TensorSpec> inputs_;
  std::optional<TensorSpec> target_;
  std::string loss_;
  int64_t classes_ = 0;
  int64_t microbatch_ = 1;
  uint64_t seed_ = 0;
  std::vector<at::Tensor> samples_;  // per input, all samples (empty: synthetic)
  at::Tensor targets_;
  std::string description_;
};

}  // namespace flexpipe::runtime
