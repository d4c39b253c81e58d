// Where training tokens come from. Every micro-batch is a pure function of (seed, step, global
// micro-batch index), so that ranks, data-parallel replicas, the single-process reference and a
// resumed run all see the same data without communicating, and a data position is just a step.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "builtin_model/operators.h"

namespace flexpipe::runtime {

class DataSource {
 public:
  // Learnable synthetic sequences: from a random first token, each next token is the current one's
  // successor under a permutation of the vocabulary fixed by the seed; then one token in ten is
  // replaced by noise. A model that learns the permutation predicts nine tokens in ten, so the loss
  // falls from log(vocab) towards about 0.1 log(vocab) + 0.33 nats.
  static DataSource synthetic(int vocab, uint64_t seed);
  // Byte-level tokens of a text file (vocabulary 256); sequences start at random offsets. Throws
  // Error naming the file when it cannot be read or is shorter than one sequence.
  static DataSource text_file(const std::string& path, uint64_t seed);

  int vocab() const { return vocab_; }
  const std::string& description() const { return description_; }
  // Micro-batch `index` of step `step`: `batch` sequences of `seq_len` tokens and their targets.
  MicroBatchData microbatch(int step, int index, int batch, int seq_len) const;
  // Micro-batches first .. first + count - 1 of step `step`.
  std::vector<MicroBatchData> batch(int step, int first, int count, int batch_size, int seq_len) const;

 private:
  int vocab_ = 0;
  uint64_t seed_ = 0;
  std::string description_;
  std::shared_ptr<const std::vector<uint8_t>> text_;  // empty: synthetic
};

}  // namespace flexpipe::runtime
