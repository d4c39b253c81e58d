// What the runtime library says of the libtorch it was built against and of this machine, for
// `flexpipe version` and the head of every bug report. Torch-free: filled across dlopen.
#pragma once
#include <string>
#include <vector>

namespace flexpipe::runtime {

struct RuntimeFacts {
  std::string libtorch_version;            // "2.11.0"
  std::string cuda_version;                // the CUDA libtorch was built with, "13.0"; "" without CUDA
  std::vector<std::string> c10d_backends;  // compiled into that libtorch: "GLOO", "NCCL", ...
  int gpus = 0;                            // CUDA devices visible now (0 without a GPU or a driver)
};

}  // namespace flexpipe::runtime
