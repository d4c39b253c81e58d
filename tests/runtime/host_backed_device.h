// A training device for tests on machines without an accelerator: code that must keep every tensor
// on the device and stage transfers through host memory can be checked on the CPU alone, since a
// tensor left on (or copied to) the host is then a tensor of another device, and fails as it would
// on CUDA.
#pragma once
#include <c10/core/Device.h>

namespace flexpipe::test {

// A device that is not the host (PrivateUse1:0) whose tensors live in host memory: every operator
// runs the host's kernel on a view of the same bytes, so results equal the CPU's bit for bit, and
// an operator given tensors of both devices throws as CUDA's would.
c10::Device host_backed_device();

}  // namespace flexpipe::test
