#include "flexpipe/interop/export_manifest.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "json_reader.h"

namespace flexpipe {

namespace {

using Json = nlohmann::json;

constexpr std::array<std::pair<const char*, ElementType>, 10> kElementTypes = {{{"float32", ElementType::Float32},
                                                                                {"float64", ElementType::Float64},
                                                                                {"float16", ElementType::Float16},
                                                                                {"bfloat16", ElementType::BFloat16},
                                                                                {"int64", ElementType::Int64},
                                                                                {"int32", ElementType::Int32},
                                                                                {"int16", ElementType::Int16},
                                                                                {"int8", ElementType::Int8},
                                                                                {"uint8", ElementType::UInt8},
                                                                                {"bool", ElementType::Bool}}};

// Every error names the manifest and the field, as a path from the document's root.
class ManifestReader {
 public:
  explicit ManifestReader(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& message) const { throw Error(fmt::format("{}: {}", path_, message)); }

  const Json& field(const Json& object, const std::string& key, const std::string& where) const {
    if (!object.is_object() || !object.contains(key))
      fail(fmt::format("{} has no '{}' (written by another version of flexpipe export? export again)", where, key));
    return object.at(key);
  }
  const Json& list(const Json& object, const std::string& key, const std::string& where) const {
    const Json& v = field(object, key, where);
    if (!v.is_array()) fail(fmt::format("{}.{} must be a list", where, key));
    return v;
  }
  std::string text(const Json& object, const std::string& key, const std::string& where) const {
    const Json& v = field(object, key, where);
    if (!v.is_string()) fail(fmt::format("{}.{} must be a string", where, key));
    return v.get<std::string>();
  }
  int count(const Json& object, const std::string& key, const std::string& where) const {
    const Json& v = field(object, key, where);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (int64_t{1} << 30))
      fail(fmt::format("{}.{} must be a count", where, key));
    return v.get<int>();
  }
  bool flag(const Json& object, const std::string& key, const std::string& where) const {
    if (!object.contains(key)) return false;
    const Json& v = object.at(key);
    if (!v.is_boolean()) fail(fmt::format("{}.{} must be true or false", where, key));
    return v.get<bool>();
  }
  ElementType dtype(const std::string& name, const std::string& where) const {
    for (const auto& [known, type] : kElementTypes)
      if (name == known) return type;
    fail(fmt::format("{}: dtype '{}' is not one the runtime knows", where, name));
  }
  TensorSpec tensor(const Json& j, const std::string& where) const {
    TensorSpec t;
    t.name = j.is_object() && j.contains("name") ? text(j, "name", where) : std::string();
    for (const Json& d : list(j, "shape", where)) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40))
        fail(fmt::format("{}.shape holds {}, not a size", where, d.dump()));
      t.shape.push_back(d.get<int64_t>());
    }
    t.dtype = dtype(text(j, "dtype", where), where);
    t.requires_grad = flag(j, "requires_grad", where);
    t.model_input = flag(j, "model_input", where);
    return t;
  }
  std::vector<TensorSpec> tensors(const Json& object, const std::string& key, const std::string& where) const {
    const Json& entries = list(object, key, where);
    std::vector<TensorSpec> result;
    for (size_t i = 0; i < entries.size(); ++i)
      result.push_back(tensor(entries[i], fmt::format("{}.{}[{}]", where, key, i)));
    return result;
  }
  // Per entry of object[key] (already read as tensors): its state_dict names, none where it lists none.
  std::vector<std::vector<std::string>> state_names(const Json& object, const std::string& key,
                                                    const std::string& where) const {
    const Json& entries = list(object, key, where);
    std::vector<std::vector<std::string>> result;
    for (size_t i = 0; i < entries.size(); ++i) {
      std::vector<std::string> names;
      if (entries[i].contains("state_dict")) {
        const std::string at = fmt::format("{}.{}[{}].state_dict", where, key, i);
        const Json& listed = entries[i].at("state_dict");
        if (!listed.is_array()) fail(fmt::format("{} must be a list of names", at));
        for (const Json& n : listed) {
          if (!n.is_string()) fail(fmt::format("{} holds {}, not a name", at, n.dump()));
          names.push_back(n.get<std::string>());
        }
      }
      result.push_back(std::move(names));
    }
    return result;
  }

 private:
  std::string path_;
};

// Every chunk a tied parameter names holds it too, under the same state_dict name, of the same shape
// and type, and names this chunk back: the runtime sums the copies' gradients by that name and steps
// them as one tensor.
void check_tied_parameters(const ExportManifest& m, const ManifestReader& r) {
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
        if (j == other.parameters.size()) r.fail(fmt::format("{}: chunk {} holds no parameter {}", field, o, name));
        const TensorSpec &mine = chunk.parameters[i], &theirs = other.parameters[j];
        if (mine.shape != theirs.shape || mine.dtype != theirs.dtype || mine.requires_grad != theirs.requires_grad)
          r.fail(fmt::format("{}: chunk {} holds {} as [{}] {}{}, this chunk as [{}] {}{}: tied copies must agree",
                             field, o, name, fmt::join(theirs.shape, ", "), element_type_name(theirs.dtype),
                             theirs.requires_grad ? "" : " frozen", fmt::join(mine.shape, ", "),
                             element_type_name(mine.dtype), mine.requires_grad ? "" : " frozen"));
        const std::vector<int>& back = other.parameter_tied_chunks[j];
        if (std::find(back.begin(), back.end(), static_cast<int>(k)) == back.end())
          r.fail(fmt::format("{}: chunk {}'s {} does not name chunk {} in its tied_chunks", field, o, name, k));
      }
    }
  }
}

std::vector<int> tied_chunks(const Json& parameter, const ChunkSpec& chunk, size_t k, size_t i, size_t chunks,
                             const std::string& where, const ManifestReader& r) {
  std::vector<int> result;
  if (!parameter.contains("tied_chunks")) return result;
  const std::string field = fmt::format("{}.parameters[{}].tied_chunks", where, i);
  const Json& tied = parameter.at("tied_chunks");
  if (!tied.is_array())
    r.fail(fmt::format("{} must be a list of the other chunks' indices, not {}", field, tied.dump()));
  if (chunk.parameter_state_names[i].empty())
    r.fail(fmt::format("{}.parameters[{}]: a tied weight needs its state_dict names", where, i));
  for (const Json& other : tied) {
    if (!other.is_number_integer() || other.get<int64_t>() < 0 || other.get<int64_t>() >= static_cast<int64_t>(chunks))
      r.fail(fmt::format("{}: {} is not another chunk's index (0 to {})", field, other.dump(), chunks - 1));
    if (other.get<int64_t>() == static_cast<int64_t>(k))
      r.fail(fmt::format("{}: {} is this chunk: list the other chunks that hold {}", field, k,
                         chunk.parameter_state_names[i].front()));
    result.push_back(other.get<int>());
  }
  return result;
}

PieceSpec piece_of(const Json& p, const std::string& at, const ManifestReader& r) {
  PieceSpec piece;
  piece.file = r.text(p, "file", at);
  piece.memory = r.text(p, "memory", at);
  if (piece.memory != "keep" && piece.memory != "recompute" && piece.memory != "offload")
    r.fail(fmt::format("{}.memory is '{}': keep, recompute or offload", at, piece.memory));
  if (p.contains("first") && p.contains("last")) {
    piece.first = r.text(p, "first", at);
    piece.last = r.text(p, "last", at);
  }
  piece.inputs = r.tensors(p, "inputs", at);
  piece.outputs = r.tensors(p, "outputs", at);
  for (const TensorSpec& parameter : r.tensors(p, "parameters", at))
    piece.trains = piece.trains || parameter.requires_grad;
  piece.random = r.flag(p, "random", at);
  piece.updates_buffers = r.flag(p, "updates_buffers", at);
  return piece;
}

ChunkSpec chunk_of(const Json& c, size_t k, size_t chunks, const ManifestReader& r) {
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
  const Json& parameters = c.at("parameters");
  for (size_t i = 0; i < parameters.size(); ++i)
    chunk.parameter_tied_chunks.push_back(tied_chunks(parameters[i], chunk, k, i, chunks, where, r));
  if (c.contains("pieces")) {
    const Json& pieces = r.list(c, "pieces", where);
    for (size_t i = 0; i < pieces.size(); ++i) {
      chunk.pieces.push_back(piece_of(pieces[i], fmt::format("{}.pieces[{}]", where, i), r));
      chunk.offloads = chunk.offloads || chunk.pieces.back().memory == "offload";
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
  return chunk;
}

}  // namespace

std::string element_type_name(ElementType type) {
  for (const auto& [name, known] : kElementTypes)
    if (type == known) return name;
  return "unknown";
}

bool is_floating(ElementType type) {
  return type == ElementType::Float32 || type == ElementType::Float64 || type == ElementType::Float16 ||
         type == ElementType::BFloat16;
}

ExportManifest parse_export_manifest(const std::string& text, const std::string& path) {
  const Json j = detail::parse_json_text(text, path, "invalid JSON", detail::ColumnUnit::Byte);
  const ManifestReader r(path);
  if (!j.is_object() || !j.contains("format") || j.at("format") != "flexpipe-export")
    r.fail("not a flexpipe export manifest (\"format\": \"flexpipe-export\")");
  if (!j.contains("version") || j.at("version") != 1)
    r.fail(fmt::format("manifest version {} (this runtime reads version 1)",
                       j.contains("version") ? j.at("version").dump() : "none"));
  ExportManifest m;
  m.graph = r.text(j, "graph", "the manifest");
  m.graph_operators = r.count(j, "graph_operators", "the manifest");
  m.dtype = r.dtype(r.text(j, "dtype", "the manifest"), "dtype");
  m.inputs = r.tensors(j, "inputs", "the manifest");
  m.outputs = r.tensors(j, "outputs", "the manifest");
  const Json& chunks = j.contains("chunks") ? j.at("chunks") : Json();
  if (!chunks.is_array() || chunks.empty()) r.fail("'chunks' must be a non-empty list");
  for (size_t k = 0; k < chunks.size(); ++k) m.chunks.push_back(chunk_of(chunks[k], k, chunks.size(), r));
  check_tied_parameters(m, r);
  const Json& loss = r.field(j, "loss", "the manifest");
  m.loss.kind = r.text(loss, "kind", "loss");
  m.loss.file = r.text(loss, "file", "loss");
  for (const Json& n : r.list(loss, "inputs", "loss")) {
    if (!n.is_string()) r.fail("loss.inputs must be names");
    m.loss.inputs.push_back(n.get<std::string>());
  }
  if (loss.contains("target") && !loss.at("target").is_null())
    m.loss.target = r.tensor(loss.at("target"), "loss.target");
  return m;
}

ExportManifest read_export_manifest(const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "manifest.json").string();
  if (!std::filesystem::is_regular_file(path))
    throw Error(fmt::format("{}: no manifest: {} holds no export (write one with `flexpipe export`)", path, directory));
  ExportManifest m = parse_export_manifest(read_text_file(path), path);
  m.directory = directory;
  return m;
}

}  // namespace flexpipe
