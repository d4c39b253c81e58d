// Reading an export's manifest and loading its TorchScript modules.
#include "scripted_model.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/serialization/import.h>
#include <nlohmann/json.hpp>

#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "saved_tensor_hooks.h"

namespace flexpipe::runtime {

namespace {

using Json = nlohmann::json;

class ManifestReader {
 public:
  explicit ManifestReader(std::string path) : path_(std::move(path)) {}

  const Json& field(const Json& object, const std::string& key, const std::string& where) const {
    if (!object.is_object() || !object.contains(key))
      throw Error(fmt::format("{}: {} has no '{}' (written by another version of flexpipe export? export again)", path_,
                              where, key));
    return object.at(key);
  }
  std::string text(const Json& object, const std::string& key, const std::string& where) const {
    const Json& v = field(object, key, where);
    if (!v.is_string()) throw Error(fmt::format("{}: {}.{} must be a string", path_, where, key));
    return v.get<std::string>();
  }
  int count(const Json& object, const std::string& key, const std::string& where) const {
    const Json& v = field(object, key, where);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 30))
      throw Error(fmt::format("{}: {}.{} must be a count", path_, where, key));
    return v.get<int>();
  }
  bool flag(const Json& object, const std::string& key, const std::string& where) const {
    if (!object.contains(key)) return false;
    const Json& v = object.at(key);
    if (!v.is_boolean()) throw Error(fmt::format("{}: {}.{} must be true or false", path_, where, key));
    return v.get<bool>();
  }
  at::ScalarType dtype(const std::string& name, const std::string& where) const {
    static const std::map<std::string, at::ScalarType> types = {{"float32", at::kFloat}, {"float64", at::kDouble},
                                                                {"float16", at::kHalf},  {"bfloat16", at::kBFloat16},
                                                                {"int64", at::kLong},    {"int32", at::kInt},
                                                                {"int16", at::kShort},   {"int8", at::kChar},
                                                                {"uint8", at::kByte},    {"bool", at::kBool}};
    auto it = types.find(name);
    if (it == types.end())
      throw Error(fmt::format("{}: {}: dtype '{}' is not one the runtime knows", path_, where, name));
    return it->second;
  }
  TensorSpec tensor(const Json& j, const std::string& where) const {
    TensorSpec t;
    t.name = j.contains("name") ? text(j, "name", where) : std::string();
    const Json& shape = field(j, "shape", where);
    if (!shape.is_array()) throw Error(fmt::format("{}: {}.shape must be a list of sizes", path_, where));
    for (const Json& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40))
        throw Error(fmt::format("{}: {}.shape holds {}, not a size", path_, where, d.dump()));
      t.shape.push_back(d.get<int64_t>());
    }
    t.dtype = dtype(text(j, "dtype", where), where);
    t.requires_grad = flag(j, "requires_grad", where);
    t.model_input = flag(j, "model_input", where);
    return t;
  }
  std::vector<TensorSpec> tensors(const Json& object, const std::string& key, const std::string& where) const {
    const Json& list = field(object, key, where);
    if (!list.is_array()) throw Error(fmt::format("{}: {}.{} must be a list", path_, where, key));
    std::vector<TensorSpec> result;
    for (size_t i = 0; i < list.size(); ++i) result.push_back(tensor(list[i], fmt::format("{}.{}[{}]", where, key, i)));
    return result;
  }
  std::vector<std::vector<std::string>> state_names(const Json& object, const std::string& key,
                                                    const std::string& where) const {
    std::vector<std::vector<std::string>> result;
    for (const Json& p : field(object, key, where)) {
      std::vector<std::string> names;
      if (p.contains("state_dict"))
        for (const Json& n : p.at("state_dict"))
          if (n.is_string()) names.push_back(n.get<std::string>());
      result.push_back(std::move(names));
    }
    return result;
  }

 private:
  std::string path_;
};

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    default: return c10::toString(type);
  }
}

// Every chunk a tied parameter names holds it too, under the same state_dict name, of the same shape
// and type, and names this chunk back: the runtime sums the copies' gradients by that name and steps
// them as one tensor.
void check_tied_parameters(const ExportManifest& m, const std::string& path) {
  for (size_t k = 0; k < m.chunks.size(); ++k) {
    const ChunkSpec& chunk = m.chunks[k];
    for (size_t i = 0; i < chunk.parameters.size(); ++i) {
      const std::string field = fmt::format("chunks[{}].parameters[{}].tied_chunks", k, i);
      for (int o : chunk.parameter_tied_chunks[i]) {
        const ChunkSpec& other = m.chunks[o];
        const std::string& name = chunk.parameter_state_names[i].front();
        size_t j = 0;
        while (j < other.parameters.size() &&
               (other.parameter_state_names[j].empty() || other.parameter_state_names[j].front() != name))
          ++j;
        if (j == other.parameters.size())
          throw Error(fmt::format("{}: {}: chunk {} holds no parameter {}", path, field, o, name));
        const TensorSpec &mine = chunk.parameters[i], &theirs = other.parameters[j];
        if (mine.shape != theirs.shape || mine.dtype != theirs.dtype || mine.requires_grad != theirs.requires_grad)
          throw Error(
              fmt::format("{}: {}: chunk {} holds {} as [{}] {}{}, this chunk as [{}] {}{}: tied copies must agree",
                          path, field, o, name, fmt::join(theirs.shape, ", "), dtype_name(theirs.dtype),
                          theirs.requires_grad ? "" : " frozen", fmt::join(mine.shape, ", "), dtype_name(mine.dtype),
                          mine.requires_grad ? "" : " frozen"));
        const std::vector<int>& back = other.parameter_tied_chunks[j];
        if (std::find(back.begin(), back.end(), static_cast<int>(k)) == back.end())
          throw Error(
              fmt::format("{}: {}: chunk {}'s {} does not name chunk {} in its tied_chunks", path, field, o, name, k));
      }
    }
  }
}

}  // namespace

ExportManifest read_export_manifest(const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "manifest.json").string();
  if (!std::filesystem::is_regular_file(path))
    throw Error(fmt::format("{}: no manifest: {} holds no export (write one with `flexpipe export`)", path, directory));
  Json j;
  try {
    j = Json::parse(read_text_file(path));
  } catch (const Json::exception& e) {
    throw Error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  const ManifestReader r(path);
  if (!j.is_object() || !j.contains("format") || j.at("format") != "flexpipe-export")
    throw Error(fmt::format("{}: not a flexpipe export manifest (\"format\": \"flexpipe-export\")", path));
  if (!j.contains("version") || j.at("version") != 1)
    throw Error(fmt::format("{}: manifest version {} (this runtime reads version 1)", path,
                            j.contains("version") ? j.at("version").dump() : "none"));
  ExportManifest m;
  m.directory = directory;
  m.graph = r.text(j, "graph", "the manifest");
  m.graph_operators = r.count(j, "graph_operators", "the manifest");
  m.dtype = r.dtype(r.text(j, "dtype", "the manifest"), "dtype");
  m.inputs = r.tensors(j, "inputs", "the manifest");
  m.outputs = r.tensors(j, "outputs", "the manifest");
  const Json& chunks = r.field(j, "chunks", "the manifest");
  if (!chunks.is_array() || chunks.empty()) throw Error(fmt::format("{}: 'chunks' must be a non-empty list", path));
  for (size_t k = 0; k < chunks.size(); ++k) {
    const Json& c = chunks[k];
    const std::string where = fmt::format("chunks[{}]", k);
    ChunkSpec chunk;
    chunk.file = r.text(c, "file", where);
    chunk.operators = r.count(c, "operators", where);
    chunk.first = r.text(c, "first", where);
    chunk.last = r.text(c, "last", where);
    chunk.inputs = r.tensors(c, "inputs", where);
    chunk.outputs = r.tensors(c, "outputs", where);
    chunk.parameters = r.tensors(c, "parameters", where);
    chunk.buffers = r.tensors(c, "buffers", where);
    chunk.parameter_state_names = r.state_names(c, "parameters", where);
    chunk.buffer_state_names = r.state_names(c, "buffers", where);
    const Json& parameters = r.field(c, "parameters", where);
    for (size_t i = 0; i < parameters.size(); ++i) {
      chunk.parameter_tied_chunks.emplace_back();
      if (!parameters[i].contains("tied_chunks")) continue;
      const std::string field = fmt::format("{}.parameters[{}].tied_chunks", where, i);
      const Json& tied = parameters[i].at("tied_chunks");
      if (!tied.is_array())
        throw Error(
            fmt::format("{}: {} must be a list of the other chunks' indices, not {}", path, field, tied.dump()));
      if (chunk.parameter_state_names[i].empty())
        throw Error(fmt::format("{}: {}.parameters[{}]: a tied weight needs its state_dict names", path, where, i));
      for (const Json& other : tied) {
        if (!other.is_number_integer() || other.get<int64_t>() < 0 ||
            other.get<int64_t>() >= static_cast<int64_t>(chunks.size()))
          throw Error(fmt::format("{}: {}: {} is not another chunk's index (0 to {})", path, field, other.dump(),
                                  chunks.size() - 1));
        if (other.get<int64_t>() == static_cast<int64_t>(k))
          throw Error(fmt::format("{}: {}: {} is this chunk: list the other chunks that hold {}", path, field, k,
                                  chunk.parameter_state_names[i].front()));
        chunk.parameter_tied_chunks.back().push_back(other.get<int>());
      }
    }
    if (c.contains("pieces")) {
      const Json& pieces = c.at("pieces");
      for (size_t i = 0; i < pieces.size(); ++i) {
        const std::string at = fmt::format("{}.pieces[{}]", where, i);
        PieceSpec piece;
        piece.file = r.text(pieces[i], "file", at);
        piece.memory = r.text(pieces[i], "memory", at);
        if (piece.memory != "keep" && piece.memory != "recompute" && piece.memory != "offload")
          throw Error(fmt::format("{}: {}.memory is '{}': keep, recompute or offload", path, at, piece.memory));
        if (pieces[i].contains("first") && pieces[i].contains("last")) {
          piece.first = r.text(pieces[i], "first", at);
          piece.last = r.text(pieces[i], "last", at);
        }
        piece.inputs = r.tensors(pieces[i], "inputs", at);
        piece.outputs = r.tensors(pieces[i], "outputs", at);
        for (const TensorSpec& parameter : r.tensors(pieces[i], "parameters", at))
          piece.trains = piece.trains || parameter.requires_grad;
        piece.random = r.flag(pieces[i], "random", at);
        piece.updates_buffers = r.flag(pieces[i], "updates_buffers", at);
        chunk.offloads = chunk.offloads || piece.memory == "offload";
        chunk.pieces.push_back(std::move(piece));
      }
    }
    if (chunk.pieces.empty()) {
      PieceSpec whole;
      whole.file = chunk.file;
      whole.first = chunk.first;
      whole.last = chunk.last;
      for (const TensorSpec& parameter : chunk.parameters) whole.trains = whole.trains || parameter.requires_grad;
      whole.inputs = chunk.inputs;
      whole.outputs = chunk.outputs;
      whole.random = r.flag(c, "random", where);
      whole.updates_buffers = r.flag(c, "updates_buffers", where);
      chunk.pieces.push_back(std::move(whole));
    }
    m.chunks.push_back(std::move(chunk));
  }
  check_tied_parameters(m, path);
  const Json& loss = r.field(j, "loss", "the manifest");
  m.loss.kind = r.text(loss, "kind", "loss");
  m.loss.file = r.text(loss, "file", "loss");
  for (const Json& n : r.field(loss, "inputs", "loss")) {
    if (!n.is_string()) throw Error(fmt::format("{}: loss.inputs must be names", path));
    m.loss.inputs.push_back(n.get<std::string>());
  }
  if (loss.contains("target") && !loss.at("target").is_null())
    m.loss.target = r.tensor(loss.at("target"), "loss.target");
  return m;
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

ScriptedChunk load_scripted_chunk(const ExportManifest& manifest, int chunk) {
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
    std::vector<int> params, buffers;
    for (const auto& named : module.named_parameters(/*recurse=*/true)) {
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
  if (chunk + 1 == static_cast<int>(manifest.chunks.size())) c.loss = load_module(manifest, manifest.loss.file);
  return c;
}

}  // namespace flexpipe::runtime
