// Where a rank's tensors live when it trains on a device that is not the host, and how they cross to
// the host: the transports carry host tensors (Gloo reads host memory), and OFFLOAD parks saved
// activations there. On the host itself every function here is a copy where a copy is promised and
// nothing otherwise, so a CPU run is unchanged.
#pragma once
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "builtin_model/operators.h"

namespace flexpipe::runtime {

// A copy of `t` in host memory of its own, even when `t` is on the host already (an offloaded tensor
// must not share the device's storage); page-locked when it leaves a CUDA device, so that the copy is
// a DMA transfer and the buffer can serve a later asynchronous one.
at::Tensor host_copy(const at::Tensor& t);

// A copy of `t` on `device`, even when `t` is there already (a reloaded tensor gets storage of its own).
at::Tensor device_copy(const at::Tensor& t, c10::Device device);

// `t` where a transport can read it: itself when on the host, otherwise a host copy.
at::Tensor staged_on_host(const at::Tensor& t);

// The micro-batches' data on `device` (tokens, targets and a captured model's inputs).
std::vector<MicroBatchData> placed_on(const std::vector<MicroBatchData>& batch, c10::Device device);

// Waits until the work queued on `device` is done, so that a clock read after it times the device's
// work, not its queueing; nothing on the host, whose kernels run synchronously.
void synchronize(c10::Device device);

}  // namespace flexpipe::runtime
