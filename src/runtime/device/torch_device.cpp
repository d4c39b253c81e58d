// Resolving --device to a torch device for this rank, with one error when the device cannot be used.
#include "device/torch_device.h"

#include <ATen/ATen.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <torch/version.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

c10::Device training_device(const std::string& text, const RankEnv& env) {
  const Device device = rank_device(parse_device(text), env);
  if (device.kind == Device::Kind::Cpu) return at::kCPU;
  const std::string named =
      fmt::format("--device {}", text == to_string(device) ? text : text + " (" + to_string(device) + ")");
#ifndef FLEXPIPE_TORCH_CUDA
  throw Error(
      fmt::format("{}: this runtime is built against libtorch {} without CUDA (CPU only); build FlexPipe "
                  "against a CUDA libtorch: cmake -DFLEXPIPE_PYTHON=<a Python whose torch has CUDA> (docs/runtime.md, "
                  "\"Devices\")",
                  named, TORCH_VERSION));
#else
  const int visible = at::detail::getCUDAHooks().getNumGPUs();
  if (visible == 0)
    throw Error(
        fmt::format("{}: libtorch {} has CUDA, but no CUDA device is visible to this process (the driver, "
                    "CUDA_VISIBLE_DEVICES)",
                    named, TORCH_VERSION));
  if (device.index >= visible)
    throw Error(fmt::format("{}: GPU {} does not exist: this process sees {} (cuda:0 to cuda:{})", named, device.index,
                            visible, visible - 1));
  return c10::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device.index));
#endif
}

}  // namespace flexpipe::runtime
