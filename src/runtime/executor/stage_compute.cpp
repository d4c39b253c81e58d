// Stage compute: a stage's forward, backward (whole or split), recompute and offload of one micro-batch.
#include <algorithm>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "executor/executor_state.h"
#include "flexpipe/support/error.h"

namespace flexpipe::runtime {

void Executor::State::forward(const Action& a, int stage, int mb) {
  Local& l = local(stage);
  Micro& m = l.micro[mb];
  if (l.chunk > 0) {
    Pending& p = l.recv_forward[mb];
    if (p.transfer) {
      m.inputs = take(p, forward_shapes(l.chunk), where(a));
    } else {
      const int prev = schedule.prev_stage(stage);
      if (local_of_stage[prev] < 0 || local(prev).micro[mb].outputs.empty())
        throw Error(fmt::format("{}: the input of stage {} micro-batch {} was neither received nor computed here",
                                where(a), stage, mb));
      m.inputs = std::move(local(prev).micro[mb].outputs);
      local(prev).micro[mb].outputs.clear();
    }
  }
  run_forward(l, mb);
}

void Executor::State::recompute(const Action& a, int stage, int mb) {
  Local& l = local(stage);
  Micro& m = l.micro[mb];
  if (l.scripted && m.pieces.empty())
    throw Error(fmt::format("{}: recompute before the forward of stage {} micro-batch {}", where(a), stage, mb));
  if (l.scripted && !m.offloaded) return scripted_recompute(l, mb);
  if (m.saved.empty() || (l.chunk > 0 && m.inputs.empty()))
    throw Error(fmt::format("{}: recompute before the forward of stage {} micro-batch {}", where(a), stage, mb));
  if (m.offloaded)
    throw Error(fmt::format("{}: the activations of stage {} micro-batch {} are offloaded; RELOAD them before R",
                            where(a), stage, mb));
  run_recompute(l, mb);
}

std::vector<std::vector<int64_t>> Executor::State::forward_shapes(int chunk) const {
  std::vector<std::vector<int64_t>> shapes = crossing_shapes[chunk];
  if (!relayed_generator_shape.empty()) shapes.push_back(relayed_generator_shape);
  return shapes;
}

std::vector<at::Tensor> Executor::State::output_gradients(const Action& a, Local& l, int mb) {
  Pending& p = l.recv_backward[mb];
  if (p.transfer) return take(p, crossing_shapes[l.chunk + 1], where(a));
  const int next = schedule.next_stage(l.stage);
  if (local_of_stage[next] < 0 || local(next).micro[mb].input_grads.empty())
    throw Error(fmt::format("{}: the output gradient of stage {} micro-batch {} was neither received nor computed here",
                            where(a), l.stage, mb));
  std::vector<at::Tensor> grads = std::move(local(next).micro[mb].input_grads);
  local(next).micro[mb].input_grads.clear();
  return grads;
}

void Executor::State::backward(const Action& a, int stage, int mb, bool split) {
  Local& l = local(stage);
  Micro& m = l.micro[mb];
  ChunkModule& mod = l.module;
  const int k = l.chunk;
  if (!m.has_saved)
    throw Error(
        fmt::format("{}: stage {} micro-batch {} has no saved activations (no forward, or dropped without "
                    "recompute)",
                    where(a), stage, mb));
  if (m.offloaded)
    throw Error(fmt::format("{}: the activations of stage {} micro-batch {} are offloaded; RELOAD them first", where(a),
                            stage, mb));
  if (l.scripted) {
    std::vector<at::Tensor> out;
    if (k + 1 < plan.num_chunks()) out = output_gradients(a, l, mb);
    scripted_backward(l, mb, out, split);
    return;
  }
  std::vector<at::Tensor> grads(mod.end - mod.begin);
  std::vector<at::Tensor> input_grads(plan.crossing[k].size());
  auto target = [&](int node) -> at::Tensor& {
    return mod.holds(node) ? grads[node - mod.begin] : input_grads[crossing_index[k][node]];
  };
  if (k + 1 == plan.num_chunks()) {
    grads.back() = at::full({}, 1.0 / (double(microbatches) * options.replicas),
                            at::TensorOptions().dtype(plan.dtype).device(options.device));
  } else {
    const std::vector<at::Tensor> out = output_gradients(a, l, mb);
    for (size_t i = 0; i < out.size(); ++i) add_to(target(plan.crossing[k + 1][i]), out[i]);
  }
  for (int v = mod.end - 1; v >= mod.begin; --v) {
    const int i = v - mod.begin;
    const at::Tensor& g = grads[i];
    // A whole backward rebuilds each recompute segment when it reaches it and drops it after.
    const bool segment_by_segment = l.recompute[mb] && !l.split_backward && l.segment_of[i] >= 0;
    if (segment_by_segment && g.defined() && !m.rebuilt[i]) rebuild_segment(l, mb, l.segment_of[i]);
    if (g.defined()) {
      Operator& op = mod.op(v);
      const Saved& saved = m.saved[i];
      ComputeTimer timer{compute_ns};
      const std::vector<at::Tensor> in = op.backward_input(g, saved);
      for (size_t j = 0; j < in.size(); ++j)
        if (in[j].defined()) add_to(target(plan.inputs[v][j]), in[j]);
      if (op.has_parameters()) {
        if (split)
          m.pending_weight.emplace_back(v, g);
        else
          op.backward_weight(g, saved);
      }
    }
    if (segment_by_segment && l.segment_of[i] == i) {
      for (int j = i; j < mod.end - mod.begin && l.segment_of[j] == i; ++j) m.saved[j].tensors.clear();
      account(l, m);
    }
  }
  m.input_grads = std::move(input_grads);
  if (k == 0) m.input_grads.clear();
  // What only the input gradient needed goes now; W keeps the rest until it runs.
  for (int v = mod.begin; v < mod.end; ++v)
    if (!split || !mod.op(v).has_parameters()) m.saved[v - mod.begin].tensors.clear();
  if (!split)
    release(l, m);
  else
    account(l, m);
}

void Executor::State::weight(const Action& a, int stage, int mb) {
  Local& l = local(stage);
  Micro& m = l.micro[mb];
  if (m.offloaded)
    throw Error(fmt::format("{}: the activations of stage {} micro-batch {} are offloaded; RELOAD them first", where(a),
                            stage, mb));
  if (l.scripted) return scripted_weight(l, mb);
  for (const auto& [node, g] : m.pending_weight) {
    ComputeTimer timer{compute_ns};
    l.module.op(node).backward_weight(g, m.saved[node - l.module.begin]);
  }
  m.pending_weight.clear();
  release(l, m);
}

void Executor::State::release(const Local& l, Micro& m) {
  m.saved.clear();
  m.checkpoints.clear();
  m.inputs.clear();
  m.has_saved = false;
  account(l, m);
}

// The value of input `p` of an operator of `l`: an in-chunk value from `values`, else a stage input.
const at::Tensor& Executor::State::input_value(const Local& l, const Micro& m, const std::vector<at::Tensor>& values,
                                               int p) const {
  return p >= l.module.begin ? values[p - l.module.begin] : m.inputs[crossing_index[l.chunk][p]];
}

// F: every operator of the chunk. When the schedule recomputes (stage, mb), the operators decided
// Recompute save nothing, and the outputs of the in-chunk operators they read from outside their
// own segment are kept as checkpoints for the rebuild.
void Executor::State::run_forward(Local& l, int mb) {
  if (l.scripted) return scripted_forward(l, mb);
  const ChunkModule& mod = l.module;
  const int k = l.chunk;
  Micro& m = l.micro[mb];
  const MicroBatchData& data = (*batch)[mb];
  const bool recomputed = l.recompute[mb];
  std::vector<at::Tensor> values(mod.end - mod.begin);
  m.saved.assign(values.size(), Saved{});
  m.checkpoints.assign(values.size(), at::Tensor{});
  Saved discarded;
  for (int v = mod.begin; v < mod.end; ++v) {
    const int i = v - mod.begin;
    const bool drop = recomputed && l.recomputed_op[i];
    std::vector<at::Tensor> in;
    for (int p : plan.inputs[v]) {
      in.push_back(input_value(l, m, values, p));
      if (drop && p >= mod.begin && l.segment_of[p - mod.begin] != l.segment_of[i])
        m.checkpoints[p - mod.begin] = values[p - mod.begin];
    }
    ComputeTimer timer{compute_ns};
    values[i] = mod.operators[i]->forward(in, data, drop ? discarded : m.saved[i]);
    discarded.tensors.clear();
  }
  m.has_saved = !recomputed;
  m.rebuilt.assign(values.size(), 0);
  account(l, m);
  if (k + 1 < plan.num_chunks()) {
    m.outputs.clear();
    for (int u : plan.crossing[k + 1]) m.outputs.push_back(input_value(l, m, values, u));
  } else {
    m.loss = values.back().item<double>();
  }
}

// Rebuilds the recompute segment that starts at operator `first` of the chunk: its operators in
// graph order, each reading what the segment rebuilt, a checkpoint or a stage input, refilling their
// saved tensors.
void Executor::State::rebuild_segment(Local& l, int mb, int first) {
  const ChunkModule& mod = l.module;
  Micro& m = l.micro[mb];
  const MicroBatchData& data = (*batch)[mb];
  std::vector<at::Tensor> values(mod.end - mod.begin);
  for (int i = first; i < mod.end - mod.begin && l.segment_of[i] == first; ++i) {
    const int v = mod.begin + i;
    std::vector<at::Tensor> in;
    for (int p : plan.inputs[v]) {
      if (p < mod.begin || l.segment_of[p - mod.begin] == first)
        in.push_back(input_value(l, m, values, p));
      else
        in.push_back(m.checkpoints[p - mod.begin]);
    }
    ComputeTimer timer{compute_ns};
    values[i] = mod.operators[i]->forward(in, data, m.saved[i]);
    m.rebuilt[i] = 1;
  }
  account(l, m);
}

// R. Before a whole backward it rebuilds the last segment only and B rebuilds the others as it
// reaches them, so one segment is alive at a time; before a split one (I, then W on what the
// weighted operators saved) it rebuilds them all.
void Executor::State::run_recompute(Local& l, int mb) {
  const int n = l.module.end - l.module.begin;
  for (int i = n - 1; i >= 0; --i) {
    if (l.segment_of[i] != i) continue;
    rebuild_segment(l, mb, i);
    if (!l.split_backward) break;
  }
  if (l.split_backward) {  // every segment is rebuilt: the checkpoints have served
    l.micro[mb].checkpoints.clear();
    account(l, l.micro[mb]);
  }
  l.micro[mb].has_saved = true;
}

// Moves the saved tensors of the operators decided Offload (all of them without decisions) to host
// memory or back, once per distinct tensor, and the recompute checkpoints (received inputs included)
// where the chunk offloads them.
void Executor::State::transfer_saved(const Action& a, int stage, int mb, bool to_host) {
  Local& l = local(stage);
  Micro& m = l.micro[mb];
  if (m.offloaded == to_host)
    throw Error(fmt::format("{}: stage {} micro-batch {} is already {}", where(a), stage, mb,
                            to_host ? "offloaded" : "on the device"));
  if (l.scripted) return scripted_transfer(l, mb, to_host);
  std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> moved;
  auto move = [&](at::Tensor& t) {
    if (!t.defined()) return;
    auto it =
        std::find_if(moved.begin(), moved.end(), [&](const auto& e) { return e.first == t.unsafeGetTensorImpl(); });
    if (it != moved.end()) {
      t = it->second;
      return;
    }
    const c10::TensorImpl* original = t.unsafeGetTensorImpl();
    at::Tensor copy = to_host ? host_copy(t) : device_copy(t, options.device);
    moved.emplace_back(original, copy);
    t = copy;
  };
  for (size_t i = 0; i < m.saved.size(); ++i)
    if (l.offloaded_op[i])
      for (at::Tensor& t : m.saved[i].tensors) move(t);
  // The received inputs are the rebuild's checkpoints too (the byte counts leave them out, as they
  // do on the device).
  if (l.offload_checkpoints && l.recompute[mb]) {
    for (at::Tensor& t : m.checkpoints) move(t);
    for (at::Tensor& t : m.inputs) move(t);
  }
  m.offloaded = to_host;
  account(l, m);
}

void Executor::State::track(int64_t delta_saved, int64_t delta_offloaded) {
  saved_bytes += delta_saved;
  offloaded_bytes += delta_offloaded;
  peak_saved = std::max(peak_saved, saved_bytes);
  peak_offloaded = std::max(peak_offloaded, offloaded_bytes);
}

// Brings the byte counts of one micro-batch up to date: saved tensors of operators whose share is on
// the host count there, everything else (saved tensors, checkpoints) on the device. A tensor that
// two operators save (softmax and P V both save the probabilities) counts once.
void Executor::State::account(const Local& l, Micro& m) {
  int64_t device = 0, host = 0;
  std::vector<const c10::TensorImpl*> counted;
  for (size_t i = 0; i < m.saved.size(); ++i)
    for (const at::Tensor& t : m.saved[i].tensors) {
      if (!t.defined() || std::find(counted.begin(), counted.end(), t.unsafeGetTensorImpl()) != counted.end()) continue;
      counted.push_back(t.unsafeGetTensorImpl());
      (m.offloaded && l.offloaded_op[i] ? host : device) += tensor_bytes(t);
    }
  for (const at::Tensor& t : m.checkpoints) (m.offloaded && l.offload_checkpoints ? host : device) += tensor_bytes(t);
  track(device - m.saved_bytes, host - m.offloaded_bytes);
  m.saved_bytes = device;
  m.offloaded_bytes = host;
}

}  // namespace flexpipe::runtime
