// Gradient synchronisation: every copy of a stage (DualPipe's, data parallelism's) sums its gradients, then clips them.
#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "executor/executor_state.h"

namespace flexpipe::runtime {

bool Executor::State::steps_at_opt() const {
  return schedule.num_pipelines == 1 && options.replicas == 1 && options.max_grad_norm == 0 && tied.empty();
}

std::vector<at::Tensor> Executor::State::gradients_of(Local& l) {
  if (l.scripted) return l.scripted->gradients;
  std::vector<at::Tensor> grads;
  for (auto& op : l.module.operators)
    for (at::Tensor& g : op->gradients()) grads.push_back(g);
  return grads;
}

// Stages that compute the same chunk in different pipelines (DualPipe) hold replicas of its
// parameters: their gradients are summed, in pipeline order on every holder, before the step.
void Executor::State::synchronise_replicas() {
  if (schedule.num_pipelines == 1) return;
  const int pipelines = schedule.num_pipelines;
  auto tag = [&](int stage) { return kReplicaTags + static_cast<uint32_t>(stage); };
  std::vector<Pending> incoming(schedule.num_stages());
  std::vector<Pending> outgoing;
  std::vector<std::vector<at::Tensor>> sums;
  for (Local& l : locals) {
    if (gradients_of(l).empty()) continue;  // a chunk without parameters (a captured model's loss alone)
    // The transports carry host tensors: the gradients go out as a host copy, come in to the host.
    const at::Tensor mine = staged_on_host(pack(gradients_of(l)));
    for (int other : l.replicas) {
      const int device = schedule.stage_device[other];
      if (device == rank) continue;
      Pending p;
      p.buffer = mine;
      p.peer = device;
      p.transfer = transport.post_send(mine, device, tag(l.stage));
      outgoing.push_back(std::move(p));
      if (!incoming[other].transfer) {
        incoming[other].buffer = at::empty_like(mine);
        incoming[other].peer = device;
        incoming[other].transfer = transport.post_recv(incoming[other].buffer, device, tag(other));
      }
    }
  }
  for (Local& l : locals) {
    if (gradients_of(l).empty()) {
      sums.emplace_back();
      continue;
    }
    at::Tensor sum;
    for (int pipeline = 0; pipeline < pipelines; ++pipeline) {
      const int other = l.replicas[pipeline];
      at::Tensor part;
      if (schedule.stage_device[other] == rank) {
        part = pack(gradients_of(local(other)));
      } else {
        Pending& p = incoming[other];
        if (p.transfer) {
          wait(*p.transfer, fmt::format("rank {}: step {}, gradient exchange of chunk {}: waiting for rank {}", me,
                                        step, l.chunk, transport.global_rank(p.peer)));
          p.transfer.reset();
        }
        part = p.buffer.to(options.device);
      }
      add_to(sum, part);
    }
    const std::vector<at::Tensor> grads = gradients_of(l);
    std::vector<std::vector<int64_t>> shapes;
    for (const at::Tensor& g : grads) shapes.push_back(g.sizes().vec());
    sums.push_back(unpack(sum.clone(), shapes));
  }
  // What was sent may be a view of the gradients themselves: overwrite them only once it is out.
  for (Pending& p : outgoing)
    wait(*p.transfer, fmt::format("rank {}: step {}, gradient exchange: sending to rank {}", me, step,
                                  transport.global_rank(p.peer)));
  for (size_t i = 0; i < locals.size(); ++i) {
    std::vector<at::Tensor> grads = gradients_of(locals[i]);
    for (size_t j = 0; j < grads.size(); ++j) grads[j].copy_(sums[i][j]);
  }
}

// A weight tied across chunks gets a gradient from each chunk that reads it; the model's gradient is
// their sum. Within each pipeline every holder sends its copy's gradient to the other holders' ranks
// and adds all of them in stage order, so the copies take identical steps (as the one tensor of the
// model does). After the replicas' sum, every pipeline's copies hold the same gradients already.
void Executor::State::synchronise_tied() {
  if (tied.empty()) return;
  auto tag = [&](size_t weight, int stage) {
    return kTiedTags + static_cast<uint32_t>(weight * schedule.num_stages() + stage);
  };
  auto gradient = [&](int stage, int parameter) -> at::Tensor& { return local(stage).scripted->gradients[parameter]; };
  auto here = [&](int stage, int pipeline) {
    return schedule.stage_device[stage] == rank && schedule.pipeline_of_stage(stage) == pipeline;
  };
  std::vector<Pending> outgoing;
  std::vector<std::vector<Pending>> incoming(tied.size());
  for (size_t w = 0; w < tied.size(); ++w) {
    incoming[w].resize(tied[w].copies.size());
    for (const auto& [stage, parameter] : tied[w].copies) {
      if (schedule.stage_device[stage] != rank) continue;
      const int pipeline = schedule.pipeline_of_stage(stage);
      at::Tensor staged;
      std::vector<int> sent_to;  // once per rank, however many copies it holds (T5's embedding: three)
      for (size_t c = 0; c < tied[w].copies.size(); ++c) {
        const int other = tied[w].copies[c].first, device = schedule.stage_device[other];
        if (device == rank || schedule.pipeline_of_stage(other) != pipeline) continue;
        if (!staged.defined()) staged = staged_on_host(gradient(stage, parameter).contiguous());
        Pending& in = incoming[w][c];
        if (!in.transfer) {
          in.buffer = at::empty_like(staged);
          in.peer = device;
          in.transfer = transport.post_recv(in.buffer, device, tag(w, other));
        }
        if (std::find(sent_to.begin(), sent_to.end(), device) != sent_to.end()) continue;
        sent_to.push_back(device);
        Pending out;
        out.buffer = staged;
        out.peer = device;
        out.transfer = transport.post_send(out.buffer, device, tag(w, stage));
        outgoing.push_back(std::move(out));
      }
    }
  }
  // Per weight and pipeline this rank holds a copy in: the sum of every copy of that pipeline.
  std::vector<std::vector<at::Tensor>> sums(tied.size(), std::vector<at::Tensor>(schedule.num_pipelines));
  for (size_t w = 0; w < tied.size(); ++w)
    for (int pipeline = 0; pipeline < schedule.num_pipelines; ++pipeline) {
      const auto& copies = tied[w].copies;
      if (std::none_of(copies.begin(), copies.end(), [&](const auto& c) { return here(c.first, pipeline); })) continue;
      at::Tensor& sum = sums[w][pipeline];
      for (size_t c = 0; c < copies.size(); ++c) {
        const auto& [stage, parameter] = copies[c];
        if (schedule.pipeline_of_stage(stage) != pipeline) continue;
        if (here(stage, pipeline)) {
          add_to(sum, gradient(stage, parameter));
          continue;
        }
        Pending& in = incoming[w][c];
        wait(*in.transfer, fmt::format("rank {}: step {}, gradient of the tied weight {}: waiting for rank {}", me,
                                       step, tied[w].name, transport.global_rank(in.peer)));
        in.transfer.reset();
        add_to(sum, in.buffer.to(options.device));
      }
      sum = sum.clone();
    }
  // What was sent may be a view of the gradients themselves: overwrite them only once it is out.
  for (Pending& p : outgoing)
    wait(*p.transfer, fmt::format("rank {}: step {}, gradient of a tied weight: sending to rank {}", me, step,
                                  transport.global_rank(p.peer)));
  for (size_t w = 0; w < tied.size(); ++w)
    for (const auto& [stage, parameter] : tied[w].copies)
      if (schedule.stage_device[stage] == rank)
        gradient(stage, parameter).copy_(sums[w][schedule.pipeline_of_stage(stage)]);
}

// Data parallelism: every replica holds the same stages; their gradients are exchanged and summed
// in replica order on every holder, so the copies take identical steps.
void Executor::State::synchronise_data_parallel() {
  if (options.replicas == 1) return;
  const int devices = schedule.num_devices;
  auto tag = [&](int stage) { return kDataParallelTags + static_cast<uint32_t>(stage); };
  std::vector<Pending> outgoing;
  std::vector<std::vector<Pending>> incoming(locals.size());
  for (size_t i = 0; i < locals.size(); ++i) {
    if (gradients_of(locals[i]).empty()) continue;  // a chunk without parameters
    const at::Tensor mine = staged_on_host(pack(gradients_of(locals[i])));
    incoming[i].resize(options.replicas);
    for (int r = 0; r < options.replicas; ++r) {
      if (r == options.replica) continue;
      const int peer = r * devices + rank;
      Pending out;
      out.buffer = mine;
      out.peer = peer;
      out.transfer = options.world->post_send(mine, peer, tag(locals[i].stage));
      outgoing.push_back(std::move(out));
      Pending& in = incoming[i][r];
      in.buffer = at::empty_like(mine);
      in.peer = peer;
      in.transfer = options.world->post_recv(in.buffer, peer, tag(locals[i].stage));
    }
  }
  std::vector<std::vector<at::Tensor>> sums;
  for (size_t i = 0; i < locals.size(); ++i) {
    std::vector<at::Tensor> grads = gradients_of(locals[i]);
    if (grads.empty()) {
      sums.emplace_back();
      continue;
    }
    const at::Tensor mine = pack(grads);
    at::Tensor sum;
    for (int r = 0; r < options.replicas; ++r) {
      if (r == options.replica) {
        add_to(sum, mine);
        continue;
      }
      Pending& in = incoming[i][r];
      wait(*in.transfer, fmt::format("rank {}: step {}, data-parallel gradients of stage {}: waiting for rank {}", me,
                                     step, locals[i].stage, in.peer));
      add_to(sum, in.buffer.to(options.device));
    }
    std::vector<std::vector<int64_t>> shapes;
    for (const at::Tensor& g : grads) shapes.push_back(g.sizes().vec());
    sums.push_back(unpack(sum.clone(), shapes));
  }
  // What was sent may be a view of the gradients themselves: overwrite them only once it is out.
  for (Pending& p : outgoing)
    wait(*p.transfer, fmt::format("rank {}: step {}, data-parallel gradients: sending to rank {}", me, step, p.peer));
  for (size_t i = 0; i < locals.size(); ++i) {
    std::vector<at::Tensor> grads = gradients_of(locals[i]);
    for (size_t j = 0; j < grads.size(); ++j) grads[j].copy_(sums[i][j]);
  }
}

// torch.nn.utils.clip_grad_norm_ over the whole model: every chunk counted once (DualPipe's second
// copy and the other data-parallel replicas hold the same gradients). Returns the norm.
double Executor::State::clip_gradients() {
  if (options.max_grad_norm <= 0) return 0;
  double local = 0;
  for (Local& l : locals) {
    if (schedule.pipeline_of_stage(l.stage) != 0) continue;
    const std::vector<at::Tensor> gradients = gradients_of(l);
    for (size_t i = 0; i < gradients.size(); ++i) {
      // A tied weight's copies hold the same sum: counted at its first chunk only.
      if (l.scripted && first_holder(*l.scripted, l.chunk, static_cast<int>(i)) != l.chunk) continue;
      local += gradients[i].to(at::kDouble).pow(2).sum().item<double>();
    }
  }
  at::Tensor total = at::full({1}, options.replica == 0 ? local : 0.0, at::TensorOptions().dtype(at::kDouble));
  try {
    transport.all_reduce_sum(total, options.timeout);
  } catch (const std::exception& e) {
    throw PeerFailure(
        fmt::format("rank {}: step {}: summing the gradient norm over all ranks: {}", me, step, e.what()));
  }
  const double norm = std::sqrt(total.item<double>());
  const double coefficient = std::min(1.0, options.max_grad_norm / (norm + 1e-6));
  for (Local& l : locals)
    for (const at::Tensor& g : gradients_of(l)) g.mul_(coefficient);
  return norm;
}

}  // namespace flexpipe::runtime
