// Which device a rank trains on: `--device cpu|cuda|cuda:N` of run, train and profile. Torch-free,
// so that a mistake is one error before any rank starts. Without an index, each rank of a job takes
// the GPU of its LOCAL_RANK (one GPU per rank, as torchrun and srun lay them out); with one, every
// rank shares that GPU.
#pragma once
#include <string>
#include <string_view>

#include "flexpipe/train/rank_env.h"

namespace flexpipe::runtime {

struct Device {
  enum class Kind { Cpu, Cuda };
  Kind kind = Kind::Cpu;
  int index = -1;  // cuda: the GPU; -1: the rank's LOCAL_RANK
  bool operator==(const Device&) const = default;
};

// "cpu", "cuda" or "cuda:N"; throws Error naming the text and the accepted forms otherwise.
Device parse_device(std::string_view text);
// The device this rank uses: cuda without an index becomes cuda:LOCAL_RANK.
Device rank_device(const Device& device, const RankEnv& env);
// "cpu", "cuda" or "cuda:N", as parse_device reads it.
std::string to_string(const Device& device);

}  // namespace flexpipe::runtime
