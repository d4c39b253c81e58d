// What the runtime library reports of its libtorch (version, CUDA, c10d backends) and of the visible GPUs.
#include "flexpipe/runtime/runtime_facts.h"

#include <algorithm>
#include <string_view>

#include <torch/cuda.h>
#include <torch/version.h>

#include "flexpipe/runtime/entry.h"

extern "C" int flexpipe_runtime_facts(flexpipe::runtime::RuntimeFacts* facts) {
  facts->libtorch_version = TORCH_VERSION;
  // Both from the build (src/runtime/CMakeLists.txt): what the linked libtorch was compiled with.
  facts->cuda_version = FLEXPIPE_TORCH_CUDA_VERSION;
  facts->c10d_backends.clear();
  const std::string_view backends = FLEXPIPE_C10D_BACKENDS;  // "GLOO,NCCL"
  for (size_t start = 0; start < backends.size();) {
    const size_t end = std::min(backends.find(',', start), backends.size());
    facts->c10d_backends.emplace_back(backends.substr(start, end - start));
    start = end + 1;
  }
  // Opens the driver lazily: 0 on a machine without one, never an error.
  facts->gpus = static_cast<int>(torch::cuda::device_count());
  return 0;
}
