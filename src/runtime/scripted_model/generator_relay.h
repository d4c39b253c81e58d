// Dropout in a pipeline equal to single-process training. One process training micro-batch j of a step
// seeds the generator once and runs the whole model, each dropout drawing where the previous one
// stopped. A pipeline runs the same operators in the same order, but on several ranks: so chunk 0
// seeds the generator per micro-batch, and each chunk hands the generator's state on with its outputs
// (the mt19937 state, 5,056 bytes, appended to what crosses the cut); the next chunk resumes from it.
// The masks are then those of the single process whatever the schedule, the placement or the cuts.
// On a GPU the generator is the GPU's (its state a seed and an offset), relayed the same way: the
// pipeline then equals one process on that GPU rather than on the host.
#pragma once
#include <cstdint>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace flexpipe::runtime {

// The seed of micro-batch `microbatch_of_step` (counted over every data-parallel copy's micro-batches) of
// step `step`: Python's torch.manual_seed(seed * 1000003 + step * 65537 + microbatch_of_step) before that
// micro-batch's forward gives the same masks.
uint64_t microbatch_seed(uint64_t seed, int step, int microbatch_of_step);

// The generator that dropout's kernels on `device` draw from: a GPU's own on CUDA, otherwise the host's
// default generator (the host's kernels are the ones that run).
at::Generator kernel_generator(c10::Device device);

// Seeds kernel_generator(device) for a micro-batch.
void seed_microbatch(uint64_t seed, int step, int microbatch_of_step, c10::Device device);

// The generator's state as a 1-D host tensor of `dtype`, to travel with a chunk's outputs, and its shape.
at::Tensor generator_state(at::ScalarType dtype, c10::Device device);
std::vector<int64_t> generator_state_shape(at::ScalarType dtype, c10::Device device);

// Resumes the generator from a state made by generator_state (received, or handed on by a chunk on this
// rank).
void resume_generator(const at::Tensor& state, c10::Device device);

}  // namespace flexpipe::runtime
