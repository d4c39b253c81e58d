// Handing a chunk's random generator state on with its outputs, so that dropout draws as one process does.
#include "scripted_model/generator_relay.h"

#include <cstring>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

namespace {

// The generator's state has one size per kind of generator (the host's: mt19937 and a cached normal
// sample; CUDA's: a seed and an offset).
int64_t state_bytes(c10::Device device) { return kernel_generator(device).get_state().numel(); }

}  // namespace

at::Generator kernel_generator(c10::Device device) {
  return device.is_cuda() ? at::globalContext().defaultGenerator(device) : at::detail::getDefaultCPUGenerator();
}

uint64_t microbatch_seed(uint64_t seed, int step, int microbatch_of_step) {
  return seed * 1000003u + uint64_t(step) * 65537u + uint64_t(microbatch_of_step);
}

void seed_microbatch(uint64_t seed, int step, int microbatch_of_step, c10::Device device) {
  kernel_generator(device).set_current_seed(microbatch_seed(seed, step, microbatch_of_step));
}

std::vector<int64_t> generator_state_shape(at::ScalarType dtype, c10::Device device) {
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  return {(state_bytes(device) + element - 1) / element};
}

at::Tensor generator_state(at::ScalarType dtype, c10::Device device) {
  const at::Tensor bytes = kernel_generator(device).get_state();
  at::Tensor state = at::zeros(generator_state_shape(dtype, device), at::TensorOptions().dtype(dtype));
  std::memcpy(state.data_ptr(), bytes.data_ptr(), static_cast<size_t>(bytes.numel()));
  return state;
}

void resume_generator(const at::Tensor& state, c10::Device device) {
  const at::Tensor from = state.cpu().contiguous();
  at::Tensor bytes = at::empty({state_bytes(device)}, at::TensorOptions().dtype(at::kByte));
  if (from.nbytes() < static_cast<size_t>(bytes.numel()))
    throw Error(fmt::format("a generator state of {} bytes, not {}: the chunk before sent something else",
                            from.nbytes(), bytes.numel()));
  std::memcpy(bytes.data_ptr(), from.data_ptr(), static_cast<size_t>(bytes.numel()));
  kernel_generator(device).set_state(bytes);
}

}  // namespace flexpipe::runtime
