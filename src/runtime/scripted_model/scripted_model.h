// A captured PyTorch model as the runtime trains it: the TorchScript modules `flexpipe export` cut at a
// partition plan's boundaries (docs/export.md), read back with their manifest. Per chunk, the pieces
// it runs in order (the whole chunk when the plan decides nothing for it), each taking and returning
// tensors by name, and the chunk's parameters by their original names, one tensor per name shared by
// every piece that reads it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/api/module.h>

#include "flexpipe/interop/export_manifest.h"

namespace flexpipe::runtime {

// The manifest's element types as torch's.
at::ScalarType scalar_type(ElementType type);

// One stage's copy of a chunk: its pieces' modules, with parameters and buffers pointed at one tensor
// per name, and the loss module on the last chunk.
struct ScriptedChunk {
  const ChunkSpec* spec = nullptr;
  std::vector<torch::jit::Module> pieces;
  std::vector<std::string> parameter_names;  // trainable, in the manifest's order
  std::vector<at::Tensor> parameters, gradients;
  std::vector<std::vector<int>> piece_parameters;  // per piece: indices into parameters
  std::vector<std::string> buffer_names;
  std::vector<at::Tensor> buffers;
  std::vector<std::vector<int>> piece_buffers;  // per piece: indices into buffers
  std::vector<const void*> state_storages;      // parameters' and buffers': not activations, whatever a graph saves
  std::vector<int> parameter_spec;              // per trainable parameter: its index in spec->parameters
  std::optional<torch::jit::Module> loss;
};

// Loads chunk `chunk`'s modules (and the loss module for the last chunk), their parameters and buffers
// on `device`; throws Error naming a file that is missing, not a TorchScript module, or whose
// parameters differ from the manifest.
ScriptedChunk load_scripted_chunk(const ExportManifest& manifest, int chunk, c10::Device device = at::kCPU);

// Whether some piece draws random numbers (dropout): then the generator's state travels with every
// micro-batch from chunk to chunk (generator_relay.h).
bool draws_random(const ExportManifest& manifest);

// Whether some piece moves its buffers when it runs (BatchNorm's running statistics in training).
bool updates_buffers(const ExportManifest& manifest);

// The chunk whose copy of parameter `parameter` (an index into spec.parameters) of chunk `chunk` counts
// once, in the gradient norm and the exported weights: the lowest index of the chunks holding it
// (`chunk` unless it is tied).
int first_holder(const ChunkSpec& spec, int chunk, int parameter);
// The same for trainable parameter `i` of a loaded chunk.
int first_holder(const ScriptedChunk& c, int chunk, int i);
// The state_dict name that identifies trainable parameter `i` across chunks.
const std::string& state_name(const ScriptedChunk& c, int i);

// Points `name` (a dotted path of submodules) of `module` at `value`.
void set_module_tensor(torch::jit::Module& module, const std::string& name, const at::Tensor& value);

}  // namespace flexpipe::runtime
