// The torch device a rank of this environment trains on for --device, or one error saying why it
// cannot: this runtime's libtorch has no CUDA, or the GPU is not there.
#pragma once
#include <string>

#include <c10/core/Device.h>

#include "flexpipe/train/device.h"
#include "flexpipe/train/rank_env.h"

namespace flexpipe::runtime {

// The host for cpu; cuda:N for cuda (N from the rank's LOCAL_RANK without an index). Throws Error when
// this runtime's libtorch has no CUDA, when no CUDA device is visible or the index is beyond them.
c10::Device training_device(const std::string& device, const RankEnv& env);

}  // namespace flexpipe::runtime
