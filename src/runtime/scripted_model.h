#pragma once
// A captured PyTorch model as the runtime trains it: the TorchScript modules `flexpipe export` cut at a
// partition plan's boundaries (docs/export.md), read back with their manifest. Per chunk, the pieces
// it runs in order (the whole chunk when the plan decides nothing for it), each taking and returning
// tensors by name, and the chunk's parameters by their original names, one tensor per name shared by
// every piece that reads it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/jit/api/module.h>

namespace flexpipe::runtime {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  at::ScalarType dtype = at::kFloat;
  bool requires_grad = false;
  bool model_input = false;
};

struct PieceSpec {
  std::string file;
  std::string memory = "keep";  // keep, recompute or offload
  std::string first, last;      // its first and last operators (empty in an older manifest)
  bool trains = false;          // holds a parameter that takes gradients: its graph lives until W
  std::vector<TensorSpec> inputs, outputs;
  bool random = false;
  bool updates_buffers = false;
};

struct ChunkSpec {
  std::string file;
  int operators = 0;
  std::string first, last;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<TensorSpec> parameters, buffers;
  std::vector<std::vector<std::string>> parameter_state_names, buffer_state_names;  // state_dict keys
  // Per parameter: the other chunks holding the same tensor (a tied weight), empty for most.
  std::vector<std::vector<int>> parameter_tied_chunks;
  std::vector<PieceSpec> pieces;  // never empty: the whole chunk as one piece where the plan decides nothing
  bool offloads = false;          // some piece is an offload run
};

struct LossSpec {
  std::string kind;
  std::string file;
  std::vector<std::string> inputs;  // the last chunk's outputs it reads, in order
  std::optional<TensorSpec> target;
};

struct ExportManifest {
  std::string directory;
  std::string graph;
  int graph_operators = 0;
  at::ScalarType dtype = at::kFloat;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<ChunkSpec> chunks;
  LossSpec loss;
};

// Reads DIR/manifest.json; throws Error naming the file and the field that is missing or wrong.
ExportManifest read_export_manifest(const std::string& directory);

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

// Loads chunk `chunk`'s modules (and the loss module for the last chunk); throws Error naming a file
// that is missing, not a TorchScript module, or whose parameters differ from the manifest.
ScriptedChunk load_scripted_chunk(const ExportManifest& manifest, int chunk);

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
