// An export's manifest (DIR/manifest.json, written by `flexpipe export`, docs/export.md): per chunk of
// the plan, its TorchScript file, the pieces it runs in order (the whole chunk when the plan decides
// nothing for it), the tensors each takes and returns by name, and the chunk's parameters and buffers
// by their state_dict names. Read here, without torch, so that the reader is fuzzed like every other;
// the runtime loads the modules it names.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flexpipe {

// The element types a manifest names (PyTorch's dtypes by their torch names without "torch.").
enum class ElementType { Float32, Float64, Float16, BFloat16, Int64, Int32, Int16, Int8, UInt8, Bool };
std::string element_type_name(ElementType type);
bool is_floating(ElementType type);

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  ElementType dtype = ElementType::Float32;
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
  ElementType dtype = ElementType::Float32;
  std::vector<TensorSpec> inputs, outputs;
  std::vector<ChunkSpec> chunks;
  LossSpec loss;
};

// Reads DIR/manifest.json; throws Error naming the file and the field that is missing or wrong.
ExportManifest read_export_manifest(const std::string& directory);
// The same from a manifest's text; `path` names it in errors. The result's directory is empty.
ExportManifest parse_export_manifest(const std::string& text, const std::string& path);

}  // namespace flexpipe
