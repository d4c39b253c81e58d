#pragma once
// The torch device a rank trains on, from --device and the rank's environment, or one error saying
// why it cannot be used by this runtime on this machine.
#include <string>

#include <c10/core/Device.h>

#include "flexpipe/train/device.h"
#include "flexpipe/train/rank_env.h"

namespace flexpipe::runtime {

// Throws Error for cuda when this runtime's libtorch has no CUDA, when no CUDA device is visible or
// the index is beyond them, and, where all of that holds, because the runtime places tensors on the
// host only so far (docs/runtime.md, "Devices").
c10::Device training_device(const std::string& device, const RankEnv& env);

}  // namespace flexpipe::runtime
