// A captured model trained in one process, every chunk in order as one autograd graph per micro-batch.
#include "scripted_model/scripted_reference.h"

#include <map>

#include <ATen/ATen.h>
#include <ATen/core/List.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>

#include "executor/optimizer.h"
#include "flexpipe/support/error.h"
#include "scripted_model/generator_relay.h"

namespace flexpipe::runtime {

namespace {

std::vector<at::Tensor> outputs_of(const c10::IValue& value) {
  if (value.isTensor()) return {value.toTensor()};
  std::vector<at::Tensor> out;
  if (value.isTuple())
    for (const c10::IValue& e : value.toTupleRef().elements()) out.push_back(e.toTensor());
  else if (value.isTensorList())
    out = value.toTensorVector();
  else
    throw Error(fmt::format("a piece returned {}, not a tuple of tensors", value.tagKind()));
  return out;
}

// One micro-batch through every chunk and the loss, with autograd: the loss tensor.
at::Tensor microbatch_loss(const ExportManifest& manifest, std::vector<ScriptedChunk>& chunks,
                           const MicroBatchData& data, uint64_t seed, int step, int microbatch_of_step) {
  std::map<std::string, at::Tensor> values;
  for (size_t j = 0; j < manifest.inputs.size() && j < data.inputs.size(); ++j)
    values[manifest.inputs[j].name] = data.inputs[j];
  // One seed per micro-batch, drawn on through every chunk, as one process running the model draws.
  if (draws_random(manifest)) seed_microbatch(seed, step, microbatch_of_step, at::kCPU);
  for (size_t k = 0; k < chunks.size(); ++k) {
    const ChunkSpec& spec = *chunks[k].spec;
    for (size_t p = 0; p < spec.pieces.size(); ++p) {
      std::vector<c10::IValue> inputs;
      for (const TensorSpec& in : spec.pieces[p].inputs) {
        auto it = values.find(in.name);
        if (it == values.end())
          throw Error(fmt::format("{}: {} reads {}, which no earlier piece or chunk provides", manifest.directory,
                                  spec.pieces[p].file, in.name));
        inputs.emplace_back(it->second);
      }
      const std::vector<at::Tensor> outputs = outputs_of(chunks[k].pieces[p].forward(inputs));
      for (size_t j = 0; j < outputs.size() && j < spec.pieces[p].outputs.size(); ++j)
        values[spec.pieces[p].outputs[j].name] = outputs[j];
    }
  }
  c10::List<at::Tensor> loss_inputs;
  for (const std::string& name : manifest.loss.inputs) loss_inputs.push_back(values.at(name));
  const c10::IValue target = data.targets.defined() ? c10::IValue(data.targets) : c10::IValue();
  return chunks.back().loss->forward({loss_inputs, target}).toTensor();
}

}  // namespace

ScriptedReferenceRun train_scripted_reference(const ExportManifest& manifest, const TensorData& data,
                                              const ReferenceTraining& training, uint64_t seed) {
  ScriptedReferenceRun run;
  std::vector<at::Tensor> parameters;
  for (size_t k = 0; k < manifest.chunks.size(); ++k) {
    run.chunks.push_back(load_scripted_chunk(manifest, static_cast<int>(k)));
    ScriptedChunk& chunk = run.chunks.back();
    for (size_t i = 0; i < chunk.parameters.size(); ++i) {
      const int first = first_holder(chunk, static_cast<int>(k), static_cast<int>(i));
      if (first == static_cast<int>(k)) {
        parameters.push_back(chunk.parameters[i]);
        continue;
      }
      // A weight tied to an earlier chunk's is that chunk's tensor, as in the model: one tensor, one
      // gradient, one step.
      const ScriptedChunk& owner = run.chunks[first];
      for (size_t j = 0; j < owner.parameters.size(); ++j)
        if (state_name(owner, static_cast<int>(j)) == state_name(chunk, static_cast<int>(i)))
          chunk.parameters[i] = owner.parameters[j];
      for (size_t p = 0; p < chunk.pieces.size(); ++p)
        for (int used : chunk.piece_parameters[p])
          if (used == static_cast<int>(i))
            set_module_tensor(chunk.pieces[p], chunk.parameter_names[i], chunk.parameters[i]);
    }
  }
  Optimizer optimizer(training.optimizer, parameters);
  const int microbatches = training.microbatches;
  for (int step = 0; step < training.steps; ++step) {
    double loss = 0;
    const std::vector<MicroBatchData> batch = data.batch(step, 0, microbatches, microbatches);
    for (int j = 0; j < microbatches; ++j) {
      at::AutoGradMode mode(true);
      const at::Tensor scaled = microbatch_loss(manifest, run.chunks, batch[j], seed, step, j) / microbatches;
      scaled.backward();
      loss += scaled.item<double>();
    }
    run.losses.push_back(loss);
    std::vector<at::Tensor> gradients;
    for (at::Tensor& p : parameters) {
      if (!p.grad().defined()) p.mutable_grad() = at::zeros_like(p);
      gradients.push_back(p.grad());
    }
    at::NoGradGuard no_grad;
    finish_reference_step(training, step, optimizer, gradients);
  }
  return run;
}

at::Tensor scripted_tensor(const ScriptedChunk& chunk, const std::string& name) {
  for (size_t i = 0; i < chunk.parameter_names.size(); ++i)
    if (chunk.parameter_names[i] == name) return chunk.parameters[i];
  for (size_t i = 0; i < chunk.buffer_names.size(); ++i)
    if (chunk.buffer_names[i] == name) return chunk.buffers[i];
  return {};
}

}  // namespace flexpipe::runtime
