// Reading an export's manifest and loading its TorchScript modules.
#include "scripted_model/scripted_model.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/serialization/import.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "scripted_model/saved_tensor_hooks.h"

namespace flexpipe::runtime {

at::ScalarType scalar_type(ElementType type) {
  switch (type) {
    case ElementType::Float32: return at::kFloat;
    case ElementType::Float64: return at::kDouble;
    case ElementType::Float16: return at::kHalf;
    case ElementType::BFloat16: return at::kBFloat16;
    case ElementType::Int64: return at::kLong;
    case ElementType::Int32: return at::kInt;
    case ElementType::Int16: return at::kShort;
    case ElementType::Int8: return at::kChar;
    case ElementType::UInt8: return at::kByte;
    case ElementType::Bool: return at::kBool;
  }
  return at::kFloat;
}

void set_module_tensor(torch::jit::Module& module, const std::string& name, const at::Tensor& value) {
  torch::jit::Module owner = module;
  size_t start = 0;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
    owner = owner.attr(name.substr(start, dot - start)).toModule();
    start = dot + 1;
  }
  owner.setattr(name.substr(start), value);
}

namespace {

torch::jit::Module load_module(const ExportManifest& manifest, const std::string& file) {
  // TorchScript's graph executor profiles a module's first calls and then runs an optimized graph whose
  // backward is its own symbolic derivative, not autograd's: the same step computes gradients that differ
  // in the last bit depending on how many calls came before, so a resumed run (whose first step is the
  // modules' first call) would not equal the uninterrupted one. Every call runs the graph as traced.
  torch::jit::setGraphExecutorOptimize(false);
  const std::string path = (std::filesystem::path(manifest.directory) / file).string();
  if (!std::filesystem::is_regular_file(path))
    throw Error(fmt::format("{}: missing: the manifest names it but the export directory does not hold it", path));
  try {
    return torch::jit::load(path);
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw Error(fmt::format("{}: not a TorchScript module flexpipe export wrote: {}", path, what));
  }
}

}  // namespace

namespace {

bool some_piece(const ExportManifest& manifest, bool PieceSpec::*flag) {
  for (const ChunkSpec& chunk : manifest.chunks)
    for (const PieceSpec& piece : chunk.pieces)
      if (piece.*flag) return true;
  return false;
}

}  // namespace

bool draws_random(const ExportManifest& manifest) { return some_piece(manifest, &PieceSpec::random); }

bool updates_buffers(const ExportManifest& manifest) { return some_piece(manifest, &PieceSpec::updates_buffers); }

int first_holder(const ChunkSpec& spec, int chunk, int parameter) {
  int first = chunk;
  for (int other : spec.parameter_tied_chunks.at(parameter)) first = std::min(first, other);
  return first;
}

int first_holder(const ScriptedChunk& c, int chunk, int i) {
  return first_holder(*c.spec, chunk, c.parameter_spec.at(i));
}

const std::string& state_name(const ScriptedChunk& c, int i) {
  const std::vector<std::string>& names = c.spec->parameter_state_names.at(c.parameter_spec.at(i));
  return names.empty() ? c.parameter_names.at(i) : names.front();
}

namespace {

// A weight two submodules of one module share (a tied embedding and LM head cut into one chunk) is one
// tensor in two slots, which the manifest lists once: unlisted slot -> the listed slot of its tensor.
// Found before the module moves to its device, where each slot would get a copy of its own.
std::map<std::string, std::string> tied_slots(const torch::jit::Module& module,
                                              const std::map<std::string, int>& parameter_index,
                                              const std::map<std::string, int>& buffer_index) {
  auto listed = [&](const std::string& name) { return parameter_index.count(name) || buffer_index.count(name); };
  std::map<const void*, std::string> listed_at;
  for (const auto& named : module.named_parameters(/*recurse=*/true))
    if (listed(named.name)) listed_at.emplace(named.value.unsafeGetTensorImpl(), named.name);
  std::map<std::string, std::string> aliases;
  for (const auto& named : module.named_parameters(/*recurse=*/true))
    if (!listed(named.name))
      if (auto it = listed_at.find(named.value.unsafeGetTensorImpl()); it != listed_at.end())
        aliases.emplace(named.name, it->second);
  return aliases;
}

}  // namespace

ScriptedChunk load_scripted_chunk(const ExportManifest& manifest, int chunk, c10::Device device) {
  const ChunkSpec& spec = manifest.chunks.at(chunk);
  ScriptedChunk c;
  c.spec = &spec;
  std::map<std::string, int> parameter_index, buffer_index;
  for (size_t j = 0; j < spec.parameters.size(); ++j)
    if (spec.parameters[j].requires_grad) {
      parameter_index[spec.parameters[j].name] = static_cast<int>(c.parameter_names.size());
      c.parameter_names.push_back(spec.parameters[j].name);
      c.parameter_spec.push_back(static_cast<int>(j));
      c.parameters.emplace_back();
    }
  // Frozen parameters (requires_grad=False) are kept like buffers: checkpointed and exported, never trained.
  for (const std::vector<TensorSpec>* list : {&spec.buffers, &spec.parameters})
    for (const TensorSpec& b : *list) {
      if (list == &spec.parameters && b.requires_grad) continue;
      buffer_index[b.name] = static_cast<int>(c.buffer_names.size());
      c.buffer_names.push_back(b.name);
      c.buffers.emplace_back();
    }
  const std::string where = (std::filesystem::path(manifest.directory) / "manifest.json").string();
  for (const PieceSpec& piece : spec.pieces) {
    torch::jit::Module module = load_module(manifest, piece.file);
    const std::map<std::string, std::string> aliases = tied_slots(module, parameter_index, buffer_index);
    // Everything the module holds, the trace's constants included, where it computes.
    module.to(device);
    std::vector<int> params, buffers;
    for (const auto& named : module.named_parameters(/*recurse=*/true)) {
      if (aliases.count(named.name)) continue;
      auto it = parameter_index.find(named.name);
      if (it == parameter_index.end()) {
        if (named.value.requires_grad() || !buffer_index.count(named.name))
          throw Error(
              fmt::format("{}: {} holds parameter {}, which chunk {}'s manifest entry does not list: the "
                          "module is from another export",
                          where, piece.file, named.name, chunk));
        at::Tensor& frozen = c.buffers[buffer_index.at(named.name)];
        if (!frozen.defined()) frozen = named.value.detach();
        set_module_tensor(module, named.name, frozen);
        buffers.push_back(buffer_index.at(named.name));
        continue;
      }
      at::Tensor& shared = c.parameters[it->second];
      if (!shared.defined()) {
        shared = named.value.detach().requires_grad_(true);
      } else if (!shared.sizes().equals(named.value.sizes())) {
        throw Error(fmt::format("{}: {} holds {} of shape {}, another piece of chunk {} of shape {}", where, piece.file,
                                named.name, fmt::join(named.value.sizes(), "x"), chunk,
                                fmt::join(shared.sizes(), "x")));
      }
      set_module_tensor(module, named.name, shared);
      params.push_back(it->second);
    }
    for (const auto& named : module.named_buffers(/*recurse=*/true)) {
      auto it = buffer_index.find(named.name);
      if (it == buffer_index.end()) continue;  // a constant the trace made: never trained, never saved
      at::Tensor& shared = c.buffers[it->second];
      if (!shared.defined()) shared = named.value;
      set_module_tensor(module, named.name, shared);
      buffers.push_back(it->second);
    }
    for (const auto& [slot, listed] : aliases)
      set_module_tensor(module, slot,
                        parameter_index.count(listed) ? c.parameters[parameter_index.at(listed)]
                                                      : c.buffers[buffer_index.at(listed)]);
    c.pieces.push_back(std::move(module));
    c.piece_parameters.push_back(std::move(params));
    c.piece_buffers.push_back(std::move(buffers));
  }
  for (size_t i = 0; i < c.parameters.size(); ++i) {
    if (!c.parameters[i].defined())
      throw Error(fmt::format("{}: no module of chunk {} holds parameter {}", where, chunk, c.parameter_names[i]));
    c.gradients.push_back(at::zeros_like(c.parameters[i]));
    c.state_storages.push_back(storage_key(c.parameters[i]));
  }
  for (size_t i = 0; i < c.buffers.size(); ++i) {
    if (!c.buffers[i].defined())
      throw Error(fmt::format("{}: no module of chunk {} holds buffer {}", where, chunk, c.buffer_names[i]));
    // BatchNorm's graph saves its running statistics; they are the model's, as in the capture.
    c.state_storages.push_back(storage_key(c.buffers[i]));
  }
  if (chunk + 1 == static_cast<int>(manifest.chunks.size())) {
    c.loss = load_module(manifest, manifest.loss.file);
    c.loss->to(device);
  }
  return c;
}

}  // namespace flexpipe::runtime
