// Reads and writes an export's manifest.json: chunks, their pieces, tensors by name, parameters and buffers.
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

// Every error names the manifest and the field, as a path from the document's root, like the
// other JSON readers'.
class ManifestReader : public interop::JsonPathReader {
 public:
  explicit ManifestReader(const std::string& origin) : JsonPathReader(origin) {}

  // A field every exporter writes: missing, another version wrote the file.
  const Json& field(const Json& object, const std::string& path, const char* key) const {
    require_object(object, path);
    if (!object.contains(key))
      fail(interop::json_child(path, key), "missing (written by another version of flexpipe export? export again)");
    return object.at(key);
  }
  const Json& list(const Json& object, const std::string& path, const char* key) const {
    const Json& v = field(object, path, key);
    if (!v.is_array()) fail(interop::json_child(path, key), "expected a list, got " + interop::describe_json(v));
    return v;
  }
  std::string text(const Json& object, const std::string& path, const char* key) const {
    return JsonPathReader::text(field(object, path, key), interop::json_child(path, key));
  }
  int count(const Json& object, const std::string& path, const char* key) const {
    return JsonPathReader::count(field(object, path, key), interop::json_child(path, key));
  }
  bool flag(const Json& object, const std::string& path, const char* key) const {
    if (!object.contains(key)) return false;
    const Json& v = object.at(key);
    if (!v.is_boolean())
      fail(interop::json_child(path, key), "expected true or false, got " + interop::describe_json(v));
    return v.get<bool>();
  }
  ElementType dtype(const Json& object, const std::string& path) const {
    const std::string name = text(object, path, "dtype");
    for (const auto& [known, type] : kElementTypes)
      if (name == known) return type;
    std::vector<std::string> known;
    for (const auto& entry : kElementTypes) known.emplace_back(entry.first);
    fail(interop::json_child(path, "dtype"),
         fmt::format("'{}' is not a type the runtime knows ({})", name, fmt::join(known, ", ")));
  }
  TensorSpec tensor(const Json& j, const std::string& path) const {
    require_object(j, path);
    TensorSpec t;
    t.name = j.contains("name") ? text(j, path, "name") : std::string();
    const std::string shape = interop::json_child(path, "shape");
    const Json& dims = list(j, path, "shape");
    for (size_t i = 0; i < dims.size(); ++i) {
      const Json& d = dims[i];
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t{1} << 40))
        fail(interop::json_element(shape, i), "expected a size (a whole number from 0), got " + d.dump());
      t.shape.push_back(d.get<int64_t>());
    }
    t.dtype = dtype(j, path);
    t.requires_grad = flag(j, path, "requires_grad");
    t.model_input = flag(j, path, "model_input");
    return t;
  }
  std::vector<TensorSpec> tensors(const Json& object, const std::string& path, const char* key) const {
    const Json& entries = list(object, path, key);
    std::vector<TensorSpec> result;
    for (size_t i = 0; i < entries.size(); ++i)
      result.push_back(tensor(entries[i], interop::json_element(interop::json_child(path, key), i)));
    return result;
  }
  // Per entry of object[key] (already read as tensors): its state_dict names, none where it lists none.
  std::vector<std::vector<std::string>> state_names(const Json& object, const std::string& path,
                                                    const char* key) const {
    const Json& entries = list(object, path, key);
    std::vector<std::vector<std::string>> result;
    for (size_t i = 0; i < entries.size(); ++i) {
      std::vector<std::string> names;
      if (entries[i].contains("state_dict")) {
        const std::string at =
            interop::json_child(interop::json_element(interop::json_child(path, key), i), "state_dict");
        const Json& listed = entries[i].at("state_dict");
        if (!listed.is_array()) fail(at, "expected a list of names, got " + interop::describe_json(listed));
        for (size_t n = 0; n < listed.size(); ++n) {
          if (!listed[n].is_string())
            fail(interop::json_element(at, n), "expected a name, got " + interop::describe_json(listed[n]));
          names.push_back(listed[n].get<std::string>());
        }
      }
      result.push_back(std::move(names));
    }
    return result;
  }
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
        if (j == other.parameters.size()) r.fail(field, fmt::format("chunk {} holds no parameter {}", o, name));
        const TensorSpec &mine = chunk.parameters[i], &theirs = other.parameters[j];
        if (mine.shape != theirs.shape || mine.dtype != theirs.dtype || mine.requires_grad != theirs.requires_grad)
          r.fail(field, fmt::format("chunk {} holds {} as [{}] {}{}, this chunk as [{}] {}{}: tied copies must agree",
                                    o, name, fmt::join(theirs.shape, ", "), element_type_name(theirs.dtype),
                                    theirs.requires_grad ? "" : " frozen", fmt::join(mine.shape, ", "),
                                    element_type_name(mine.dtype), mine.requires_grad ? "" : " frozen"));
        const std::vector<int>& back = other.parameter_tied_chunks[j];
        if (std::find(back.begin(), back.end(), static_cast<int>(k)) == back.end())
          r.fail(field, fmt::format("chunk {}'s {} does not name chunk {} in its tied_chunks", o, name, k));
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
  if (!tied.is_array()) r.fail(field, fmt::format("expected a list of the other chunks' indices, got {}", tied.dump()));
  if (chunk.parameter_state_names[i].empty())
    r.fail(interop::json_element(interop::json_child(where, "parameters"), i),
           "a tied weight needs its state_dict names");
  for (const Json& other : tied) {
    if (!other.is_number_integer() || other.get<int64_t>() < 0 || other.get<int64_t>() >= static_cast<int64_t>(chunks))
      r.fail(field, fmt::format("{} is not another chunk's index (0 to {})", other.dump(), chunks - 1));
    if (other.get<int64_t>() == static_cast<int64_t>(k))
      r.fail(field, fmt::format("{} is this chunk: list the other chunks that hold {}", k,
                                chunk.parameter_state_names[i].front()));
    result.push_back(other.get<int>());
  }
  return result;
}

PieceSpec piece_of(const Json& p, const std::string& at, const ManifestReader& r) {
  PieceSpec piece;
  piece.file = r.text(p, at, "file");
  piece.memory = r.text(p, at, "memory");
  if (piece.memory != "keep" && piece.memory != "recompute" && piece.memory != "offload")
    r.fail(interop::json_child(at, "memory"), fmt::format("'{}' is not keep, recompute or offload", piece.memory));
  if (p.contains("first") && p.contains("last")) {
    piece.first = r.text(p, at, "first");
    piece.last = r.text(p, at, "last");
  }
  piece.inputs = r.tensors(p, at, "inputs");
  piece.outputs = r.tensors(p, at, "outputs");
  for (const TensorSpec& parameter : r.tensors(p, at, "parameters"))
    piece.trains = piece.trains || parameter.requires_grad;
  piece.random = r.flag(p, at, "random");
  piece.updates_buffers = r.flag(p, at, "updates_buffers");
  return piece;
}

ChunkSpec chunk_of(const Json& c, size_t k, size_t chunks, const ManifestReader& r) {
  const std::string where = fmt::format("chunks[{}]", k);
  ChunkSpec chunk;
  chunk.file = r.text(c, where, "file");
  chunk.operators = r.count(c, where, "operators");
  chunk.first = r.text(c, where, "first");
  chunk.last = r.text(c, where, "last");
  chunk.inputs = r.tensors(c, where, "inputs");
  chunk.outputs = r.tensors(c, where, "outputs");
  chunk.parameters = r.tensors(c, where, "parameters");
  chunk.buffers = r.tensors(c, where, "buffers");
  chunk.parameter_state_names = r.state_names(c, where, "parameters");
  chunk.buffer_state_names = r.state_names(c, where, "buffers");
  const Json& parameters = c.at("parameters");
  for (size_t i = 0; i < parameters.size(); ++i)
    chunk.parameter_tied_chunks.push_back(tied_chunks(parameters[i], chunk, k, i, chunks, where, r));
  if (c.contains("pieces")) {
    const Json& pieces = r.list(c, where, "pieces");
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
    whole.random = r.flag(c, where, "random");
    whole.updates_buffers = r.flag(c, where, "updates_buffers");
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
  const Json j = interop::parse_json_text(text, path, "invalid JSON", interop::ColumnUnit::Byte);
  const ManifestReader r(path);
  r.require_object(j, "");
  r.check_format_header(j, "flexpipe export manifest", "flexpipe-export", 1);
  ExportManifest m;
  m.graph = r.text(j, "", "graph");
  m.graph_operators = r.count(j, "", "graph_operators");
  m.dtype = r.dtype(j, "");
  m.inputs = r.tensors(j, "", "inputs");
  m.outputs = r.tensors(j, "", "outputs");
  // Both branches lvalues: with a temporary for the missing case, the conditional copied the list.
  static const Json missing;
  const Json& chunks = j.contains("chunks") ? j.at("chunks") : missing;
  if (!chunks.is_array())
    r.fail("chunks", "expected a list with one entry per chunk, got " + interop::describe_json(chunks));
  if (chunks.empty()) r.fail("chunks", "empty: an export has at least one chunk");
  for (size_t k = 0; k < chunks.size(); ++k) m.chunks.push_back(chunk_of(chunks[k], k, chunks.size(), r));
  check_tied_parameters(m, r);
  const Json& loss = r.field(j, "", "loss");
  m.loss.kind = r.text(loss, "loss", "kind");
  m.loss.file = r.text(loss, "loss", "file");
  const Json& inputs = r.list(loss, "loss", "inputs");
  for (size_t i = 0; i < inputs.size(); ++i)
    m.loss.inputs.push_back(r.JsonPathReader::text(inputs[i], interop::json_element("loss.inputs", i)));
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
