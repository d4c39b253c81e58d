#pragma once
// Whether this runtime can train on --device for a rank of this environment: nothing for cpu, one
// error saying why otherwise (placement on a device is not built yet, so no device is returned).
#include <string>

#include "flexpipe/train/device.h"
#include "flexpipe/train/rank_env.h"

namespace flexpipe::runtime {

// Throws Error for cuda when this runtime's libtorch has no CUDA, when no CUDA device is visible or
// the index is beyond them, and, where all of that holds, because the runtime places tensors on the
// host only so far (docs/runtime.md, "Devices").
void check_training_device(const std::string& device, const RankEnv& env);

}  // namespace flexpipe::runtime
