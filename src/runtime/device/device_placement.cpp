// Moving a rank's tensors between its training device and the host, copies only where a device needs them.
#include "device/device_placement.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

namespace flexpipe::runtime {

at::Tensor host_copy(const at::Tensor& t) {
  if (t.is_cpu()) return t.clone();
  return t.to(at::TensorOptions().device(at::kCPU).pinned_memory(t.is_cuda()), /*non_blocking=*/false,
              /*copy=*/true);
}

at::Tensor device_copy(const at::Tensor& t, c10::Device device) {
  return t.to(device, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor staged_on_host(const at::Tensor& t) { return t.is_cpu() ? t : host_copy(t); }

std::vector<MicroBatchData> placed_on(const std::vector<MicroBatchData>& batch, c10::Device device) {
  auto place = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
  std::vector<MicroBatchData> placed;
  placed.reserve(batch.size());
  for (const MicroBatchData& data : batch) {
    MicroBatchData& p = placed.emplace_back();
    p.tokens = place(data.tokens);
    p.targets = place(data.targets);
    for (const at::Tensor& input : data.inputs) p.inputs.push_back(place(input));
  }
  return placed;
}

void synchronize(c10::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

}  // namespace flexpipe::runtime
