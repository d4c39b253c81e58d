// The peer channel: a stage's point-to-point sends and receives to other ranks, their tags, and the waits for them.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "executor/executor_state.h"

namespace flexpipe::runtime {

namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t total_numel(const std::vector<std::vector<int64_t>>& shapes) {
  int64_t n = 0;
  for (const auto& shape : shapes) n += numel_of(shape);
  return n;
}

}  // namespace

at::Tensor pack(const std::vector<at::Tensor>& tensors) {
  if (tensors.size() == 1) return tensors[0].contiguous().view({-1});
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

std::vector<at::Tensor> unpack(const at::Tensor& buffer, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<at::Tensor> tensors;
  int64_t offset = 0;
  for (const auto& shape : shapes) {
    const int64_t n = numel_of(shape);
    tensors.push_back(buffer.narrow(0, offset, n).view(shape));
    offset += n;
  }
  return tensors;
}

void Executor::State::wait(Transfer& transfer, const std::string& what) {
  const Clock::time_point begin = Clock::now();
  try {
    transfer.wait(options.timeout);
  } catch (const std::exception& e) {
    throw PeerFailure(fmt::format("{}: {}", what, e.what()));
  }
  waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count();
}

uint32_t Executor::State::forward_tag(int to_stage, int mb) const {
  return static_cast<uint32_t>((int64_t(mb) * schedule.num_stages() + to_stage) * 2);
}

uint32_t Executor::State::backward_tag(int from_stage, int mb) const { return forward_tag(from_stage, mb) + 1; }

void Executor::State::post_send(const at::Tensor& data, int peer, uint32_t tag, const Action& a) {
  Pending p;
  p.peer = peer;
  p.posted_by = where(a);
  ComputeTimer timer{transfer_ns};  // the copy off a device included: the transfer's, not the executor's
  p.buffer = staged_on_host(data);
  p.transfer = transport.post_send(p.buffer, peer, tag);
  sends.push_back(std::move(p));
}

Executor::State::Pending Executor::State::post_recv(const std::vector<std::vector<int64_t>>& shapes, int peer,
                                                    uint32_t tag, const Action& a) {
  Pending p;
  // Page-locked when it goes on to a GPU, so that the copy there is a DMA transfer.
  p.buffer =
      at::empty({total_numel(shapes)}, at::TensorOptions().dtype(plan.dtype).pinned_memory(options.device.is_cuda()));
  p.peer = peer;
  p.posted_by = where(a);
  ComputeTimer timer{transfer_ns};
  p.transfer = transport.post_recv(p.buffer, peer, tag);
  return p;
}

std::vector<at::Tensor> Executor::State::take(Pending& p, const std::vector<std::vector<int64_t>>& shapes,
                                              const std::string& use) {
  wait(*p.transfer,
       fmt::format("{}: waiting for rank {} (receive posted at {})", use, transport.global_rank(p.peer), p.posted_by));
  std::vector<at::Tensor> tensors;
  {
    ComputeTimer timer{transfer_ns};  // the copy onto a device
    tensors = unpack(p.buffer.to(options.device), shapes);
  }
  p = Pending{};
  return tensors;
}

}  // namespace flexpipe::runtime
