// A captured model's stage compute: each chunk is a list of pieces (TorchScript modules from `flexpipe
// export`), each run as an autograd graph of its own from leaves made of its inputs, so that
// gradients go back piece by piece by tensor name. I differentiates every piece with respect to its
// inputs and keeps the graphs; W differentiates them again with respect to the parameters. A recompute
// piece runs without autograd in F and is rebuilt from its inputs (its checkpoints) before its
// backward, replaying the generator and leaving BatchNorm's statistics where F moved them. OFFLOAD
// and RELOAD move what the offload pieces' graphs saved (saved_tensor_hooks.h).
#include <algorithm>

#include <ATen/ATen.h>
#include <ATen/core/Generator.h>
#include <ATen/core/List.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include "executor/executor_state.h"
#include "flexpipe/support/error.h"
#include "scripted_model/generator_relay.h"

namespace flexpipe::runtime {

namespace {

// Everything travels in the training dtype, in one receive buffer; integer tensors and masks come back to
// their own type and the chunk holds them so: what its operators save of one is that tensor (the cost
// graph's unscaled edge). The floating tensors are then copied out of the buffer, which would otherwise
// stay, holding the integers' travelling copies too. A floating tensor of another type (a float32 mask
// torch.full made in a float64 model) is held as it travelled, as the cost graph scales it.
void hold_in_their_types(const ChunkSpec& spec, std::vector<at::Tensor>& received) {
  std::vector<const void*> converted;
  for (size_t i = 0; i < spec.inputs.size() && i < received.size(); ++i) {
    const at::ScalarType type = scalar_type(spec.inputs[i].dtype);
    if (received[i].scalar_type() == type || at::isFloatingType(type)) continue;
    converted.push_back(storage_key(received[i]));
    received[i] = received[i].to(type);
  }
  if (converted.empty()) return;
  for (at::Tensor& t : received)
    if (std::find(converted.begin(), converted.end(), storage_key(t)) != converted.end()) t = t.clone();
}

std::vector<at::Tensor> tensors_of(const c10::IValue& value) {
  std::vector<at::Tensor> out;
  if (value.isTensor()) {
    out.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const c10::IValue& e : value.toTupleRef().elements()) out.push_back(e.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) out.push_back(t);
  } else {
    throw Error(fmt::format("a piece returned {}, not a tuple of tensors", value.tagKind()));
  }
  return out;
}

bool differentiable(const TensorSpec& spec) { return spec.requires_grad && is_floating(spec.dtype); }

at::Tensor leaf(const at::Tensor& value, bool with_grad) {
  at::Tensor t = value.detach();
  if (with_grad) t.requires_grad_(true);
  return t;
}

// Whether OFFLOAD moves what piece `piece` saved: the offload pieces', or every piece's where the plan
// names none.
bool moves_at_offload(const ChunkSpec& spec, size_t piece) {
  return !spec.offloads || spec.pieces[piece].memory == "offload";
}

}  // namespace

// Runs piece `piece` of the chunk on `values` (tensors by name) and adds its outputs to them. Dropped:
// without autograd, keeping only the inputs for the rebuild.
void Executor::State::run_piece(Local& l, Micro& m, int piece, std::map<std::string, at::Tensor>& values,
                                bool dropped) {
  ScriptedChunk& c = *l.scripted;
  const PieceSpec& spec = c.spec->pieces[piece];
  PieceRun& run = m.pieces[piece];
  run.dropped = dropped;
  run.inputs.clear();
  for (const TensorSpec& in : spec.inputs) {
    auto it = values.find(in.name);
    if (it == values.end())
      throw Error(fmt::format("{}: {} reads {}, which no earlier piece or input of chunk {} provides",
                              plan.scripted->directory, spec.file, in.name, l.chunk));
    run.inputs.push_back(leaf(it->second, !dropped && differentiable(in)));
  }
  if (spec.random) run.rng_state = kernel_generator(options.device).get_state();
  std::vector<at::Tensor> outputs;
  {
    ComputeTimer timer{compute_ns};
    at::AutoGradMode mode(!dropped);
    std::optional<RecordSavedTensors> record;
    if (!dropped) record.emplace(run.saved);
    outputs = tensors_of(c.pieces[piece].forward(std::vector<c10::IValue>(run.inputs.begin(), run.inputs.end())));
  }
  if (outputs.size() != spec.outputs.size())
    throw Error(fmt::format("{}: {} returned {} tensors, the manifest lists {}", plan.scripted->directory, spec.file,
                            outputs.size(), spec.outputs.size()));
  for (size_t j = 0; j < outputs.size(); ++j) values[spec.outputs[j].name] = outputs[j];
  if (!dropped) run.outputs = std::move(outputs);
}

// Reruns a dropped piece with autograd from its inputs: the generator replayed, the buffers it moves
// (BatchNorm's statistics) swapped for copies so that they move once per micro-batch, as in F.
void Executor::State::rebuild_piece(Local& l, Micro& m, int piece) {
  ScriptedChunk& c = *l.scripted;
  const PieceSpec& spec = c.spec->pieces[piece];
  PieceRun& run = m.pieces[piece];
  for (size_t i = 0; i < run.inputs.size(); ++i) run.inputs[i] = leaf(run.inputs[i], differentiable(spec.inputs[i]));
  torch::jit::Module& module = c.pieces[piece];
  run.state_copies.clear();
  if (spec.updates_buffers)
    for (int b : c.piece_buffers[piece]) {
      run.state_copies.push_back(c.buffers[b].clone());
      set_module_tensor(module, c.buffer_names[b], run.state_copies.back());
    }
  at::Tensor generator_now;
  if (spec.random) {
    generator_now = kernel_generator(options.device).get_state();
    kernel_generator(options.device).set_state(run.rng_state);
  }
  {
    ComputeTimer timer{compute_ns};
    at::AutoGradMode mode(true);
    RecordSavedTensors record(run.saved);
    run.outputs = tensors_of(module.forward(std::vector<c10::IValue>(run.inputs.begin(), run.inputs.end())));
  }
  if (spec.random) kernel_generator(options.device).set_state(generator_now);
  if (spec.updates_buffers)
    for (int b : c.piece_buffers[piece]) set_module_tensor(module, c.buffer_names[b], c.buffers[b]);
  run.dropped = false;
  scripted_account(l, m);
}

// Where dropout of micro-batch `mb` starts drawing: chunk 0 seeds it; a later chunk resumes from the
// state the chunk before handed on after its outputs. The inputs that were views of the same receive
// buffer become tensors of their own, so that the memory accounted for holds what the chunk keeps.
void Executor::State::resume_relayed_generator(Local& l, int mb) {
  Micro& m = l.micro[mb];
  if (l.chunk == 0) return seed_microbatch(plan.seed, step, options.replica * microbatches + mb, options.device);
  if (m.inputs.size() != l.scripted->spec->inputs.size() + 1)
    throw Error(fmt::format("chunk {} micro-batch {} received {} tensors, not its {} inputs and the generator's state",
                            l.chunk, mb, m.inputs.size(), l.scripted->spec->inputs.size()));
  const at::Tensor state = m.inputs.back();
  m.inputs.pop_back();
  resume_generator(state, options.device);
  for (at::Tensor& t : m.inputs)
    if (storage_key(t) == storage_key(state)) t = t.clone();
}

void Executor::State::scripted_forward(Local& l, int mb) {
  ScriptedChunk& c = *l.scripted;
  const ChunkSpec& spec = *c.spec;
  const ExportManifest& manifest = *plan.scripted;
  Micro& m = l.micro[mb];
  const MicroBatchData& data = (*batch)[mb];
  const bool relays = !relayed_generator_shape.empty();
  if (relays) resume_relayed_generator(l, mb);
  if (l.chunk > 0) hold_in_their_types(spec, m.inputs);
  std::map<std::string, at::Tensor> values;
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const TensorSpec& in = spec.inputs[i];
    if (l.chunk == 0) {
      size_t j = 0;
      while (j < manifest.inputs.size() && manifest.inputs[j].name != in.name) ++j;
      if (j == manifest.inputs.size() || j >= data.inputs.size())
        throw Error(fmt::format("chunk 0 reads {}, which is not one of the model's inputs", in.name));
      values[in.name] = data.inputs[j];
    } else {
      values[in.name] = m.inputs.at(i).to(scalar_type(in.dtype));  // a floating one of another type
    }
  }
  m.pieces.assign(spec.pieces.size() + (c.loss ? 1 : 0), PieceRun{});
  for (size_t p = 0; p < spec.pieces.size(); ++p)
    run_piece(l, m, static_cast<int>(p), values, l.recompute[mb] && spec.pieces[p].memory == "recompute");
  if (c.loss) {
    PieceRun& run = m.pieces.back();
    c10::List<at::Tensor> outputs;
    for (const std::string& name : manifest.loss.inputs) {
      run.inputs.push_back(leaf(values.at(name), true));
      outputs.push_back(run.inputs.back());
    }
    ComputeTimer timer{compute_ns};
    at::AutoGradMode mode(true);
    RecordSavedTensors record(run.saved);
    const c10::IValue target = data.targets.defined() ? c10::IValue(data.targets) : c10::IValue();
    run.outputs = {c.loss->forward({outputs, target}).toTensor()};
    m.loss = run.outputs[0].item<double>();
  } else {
    m.outputs.clear();
    // A tensor relayed from what the chunk received is a view of the receive buffer: handed on whole
    // to a chunk on this rank, it would hold the entire buffer there until that chunk's backward.
    for (const TensorSpec& out : spec.outputs) {
      at::Tensor t = values.at(out.name).detach().to(plan.dtype);
      m.outputs.push_back(t.storage().nbytes() > t.nbytes() ? t.clone() : t);
    }
    if (relays) m.outputs.push_back(generator_state(plan.dtype, options.device).to(options.device));
  }
  m.has_saved = true;
  scripted_account(l, m);
}

// Differentiates one piece's graph: the gradients of its outputs (taken from `grads` by name) to its
// inputs (added to `grads` by name) and, unless split, to its parameters (accumulated). Split keeps
// the graph and the output gradients for W.
void Executor::State::differentiate(Local& l, PieceRun& run, const std::vector<std::string>& input_names,
                                    const std::vector<int>& parameters, std::map<std::string, at::Tensor>& grads,
                                    const std::vector<std::string>& output_names, bool split) {
  ScriptedChunk& c = *l.scripted;
  std::vector<at::Tensor> outs, seeds;
  for (size_t j = 0; j < run.outputs.size(); ++j) {
    auto it = grads.find(output_names[j]);
    if (it == grads.end()) continue;
    if (run.outputs[j].requires_grad() && it->second.defined()) {
      outs.push_back(run.outputs[j]);
      seeds.push_back(it->second.to(run.outputs[j].scalar_type()));
    }
    grads.erase(it);
  }
  std::vector<at::Tensor> wrt;
  std::vector<int> wrt_input;
  for (size_t i = 0; i < run.inputs.size(); ++i)
    if (run.inputs[i].requires_grad()) {
      wrt.push_back(run.inputs[i]);
      wrt_input.push_back(static_cast<int>(i));
    }
  const size_t first_parameter = wrt.size();
  const bool weights_now = !split || parameters.empty();
  if (weights_now)
    for (int p : parameters) wrt.push_back(c.parameters[p]);
  if (outs.empty() || wrt.empty()) {
    if (weights_now || outs.empty()) {
      run = PieceRun{};
    } else {  // nothing for I (the model's inputs), everything for W
      run.seeded = std::move(outs);
      run.seeds = std::move(seeds);
    }
    return;
  }
  std::vector<at::Tensor> got;
  {
    ComputeTimer timer{compute_ns};
    got = torch::autograd::grad(outs, wrt, seeds, /*retain_graph=*/!weights_now, /*create_graph=*/false,
                                /*allow_unused=*/true);
  }
  for (size_t i = 0; i < first_parameter; ++i)
    if (got[i].defined()) add_to(grads[input_names[wrt_input[i]]], got[i]);
  for (size_t i = first_parameter; i < got.size(); ++i)
    if (got[i].defined()) c.gradients[parameters[i - first_parameter]].add_(got[i]);
  if (weights_now) {
    run = PieceRun{};
  } else {
    run.seeded = std::move(outs);
    run.seeds = std::move(seeds);
  }
}

void Executor::State::scripted_backward(Local& l, int mb, const std::vector<at::Tensor>& output_grads, bool split) {
  ScriptedChunk& c = *l.scripted;
  const ChunkSpec& spec = *c.spec;
  Micro& m = l.micro[mb];
  std::map<std::string, at::Tensor> grads;
  auto names = [](const std::vector<TensorSpec>& specs) {
    std::vector<std::string> n;
    for (const TensorSpec& t : specs) n.push_back(t.name);
    return n;
  };
  if (c.loss) {
    PieceRun& run = m.pieces.back();
    grads["loss"] = at::full({}, 1.0 / (double(microbatches) * options.replicas), run.outputs[0].options());
    differentiate(l, run, plan.scripted->loss.inputs, {}, grads, {"loss"}, false);
  } else {
    for (size_t i = 0; i < spec.outputs.size(); ++i)
      if (differentiable(spec.outputs[i])) add_to(grads[spec.outputs[i].name], output_grads.at(i));
  }
  for (int p = static_cast<int>(spec.pieces.size()) - 1; p >= 0; --p) {
    PieceRun& run = m.pieces[p];
    if (run.dropped) rebuild_piece(l, m, p);
    differentiate(l, run, names(spec.pieces[p].inputs), c.piece_parameters[p], grads, names(spec.pieces[p].outputs),
                  split);
    scripted_account(l, m);
  }
  m.input_grads.clear();
  if (l.chunk > 0)
    for (const TensorSpec& in : spec.inputs) {
      auto it = grads.find(in.name);
      m.input_grads.push_back(it != grads.end() && it->second.defined()
                                  ? it->second.to(plan.dtype)
                                  : at::zeros(in.shape, at::TensorOptions().dtype(plan.dtype).device(options.device)));
    }
  if (!split) {
    m.pieces.clear();
    m.inputs.clear();
    m.has_saved = false;
  }
  scripted_account(l, m);
}

void Executor::State::scripted_weight(Local& l, int mb) {
  ScriptedChunk& c = *l.scripted;
  Micro& m = l.micro[mb];
  for (size_t p = 0; p < c.spec->pieces.size() && p < m.pieces.size(); ++p) {
    PieceRun& run = m.pieces[p];
    if (run.seeded.empty() || c.piece_parameters[p].empty()) continue;
    std::vector<at::Tensor> wrt;
    for (int i : c.piece_parameters[p]) wrt.push_back(c.parameters[i]);
    std::vector<at::Tensor> got;
    {
      ComputeTimer timer{compute_ns};
      got = torch::autograd::grad(run.seeded, wrt, run.seeds, /*retain_graph=*/false, /*create_graph=*/false,
                                  /*allow_unused=*/true);
    }
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i].defined()) c.gradients[c.piece_parameters[p][i]].add_(got[i]);
  }
  m.pieces.clear();
  m.inputs.clear();
  m.has_saved = false;
  scripted_account(l, m);
}

// R: before a whole backward, the last dropped piece only (B rebuilds the others as it reaches them,
// so one is alive at a time); before a split one, all of them.
void Executor::State::scripted_recompute(Local& l, int mb) {
  Micro& m = l.micro[mb];
  for (int p = static_cast<int>(l.scripted->spec->pieces.size()) - 1; p >= 0; --p) {
    if (!m.pieces[p].dropped) continue;
    rebuild_piece(l, m, p);
    if (!l.split_backward) break;
  }
}

// OFFLOAD / RELOAD: what the offload pieces' graphs saved (every piece's where the plan names none),
// and the dropped pieces' inputs where the chunk offloads its checkpoints.
void Executor::State::scripted_transfer(Local& l, int mb, bool to_host) {
  ScriptedChunk& c = *l.scripted;
  Micro& m = l.micro[mb];
  // A tensor a kept piece saves too (a ReLU's output, which the next piece's convolution saves as its
  // input), or that the chunk received (held until its backward ends), stays on the device: a copy on
  // the host would come back as a second one.
  std::vector<const void*> staying = c.state_storages;
  for (const at::Tensor& t : m.inputs) staying.push_back(storage_key(t));
  for (size_t p = 0; p < c.spec->pieces.size() && p < m.pieces.size(); ++p)
    if (!moves_at_offload(*c.spec, p)) m.pieces[p].saved.add_storages(staying);
  for (size_t p = 0; p < c.spec->pieces.size() && p < m.pieces.size(); ++p) {
    PieceRun& run = m.pieces[p];
    if (moves_at_offload(*c.spec, p)) run.saved.move(to_host ? at::kCPU : options.device, staying);
    if (l.offload_checkpoints && run.dropped)
      for (at::Tensor& t : run.inputs) t = to_host ? host_copy(t) : device_copy(t, options.device);
  }
  m.offloaded = to_host;
  scripted_account(l, m);
}

// Device bytes: what the graphs saved, the dropped pieces' checkpoints and what the chunk received
// (held until the backward ends, as the memory model's held input), each storage once and parameters
// never; host bytes: what OFFLOAD moved.
void Executor::State::scripted_account(const Local& l, Micro& m) {
  const ScriptedChunk& c = *l.scripted;
  std::vector<const void*> counted = c.state_storages;
  for (const PieceRun& run : m.pieces)
    for (const at::Tensor& copy : run.state_copies) counted.push_back(storage_key(copy));
  int64_t device = 0, host = 0;
  auto moved = [&](size_t p) { return m.offloaded && p < c.spec->pieces.size() && moves_at_offload(*c.spec, p); };
  // What stays first: a tensor an offloaded piece shares with a kept one, or with what the chunk
  // received, stayed on the device.
  for (size_t p = 0; p < m.pieces.size(); ++p)
    if (!moved(p)) device += m.pieces[p].saved.bytes(counted);
  if (m.has_saved)
    for (const at::Tensor& t : m.inputs) {
      if (std::find(counted.begin(), counted.end(), storage_key(t)) != counted.end()) continue;
      counted.push_back(storage_key(t));
      device += static_cast<int64_t>(t.storage().nbytes());
    }
  for (size_t p = 0; p < m.pieces.size(); ++p) {
    const PieceRun& run = m.pieces[p];
    if (moved(p)) host += run.saved.bytes(counted);
    if (run.dropped)
      for (const at::Tensor& t : run.inputs) {
        if (std::find(counted.begin(), counted.end(), storage_key(t)) != counted.end()) continue;
        counted.push_back(storage_key(t));
        (m.offloaded && l.offload_checkpoints ? host : device) += static_cast<int64_t>(t.storage().nbytes());
      }
  }
  track(device - m.saved_bytes, host - m.offloaded_bytes);
  m.saved_bytes = device;
  m.offloaded_bytes = host;
}

}  // namespace flexpipe::runtime
