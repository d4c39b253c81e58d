// Gathering replica 0's trained weights from every rank into one state_dict file by their original names.
#include "session/weight_export.h"

#include <map>

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <fmt/format.h>
#include <torch/serialize.h>

#include "flexpipe/support/files.h"
#include "scripted_model/scripted_model.h"
#include "session/rank_collectives.h"

namespace flexpipe::runtime {

namespace {

// One tensor of the exported dict, at `offset` in the flat buffer the ranks sum.
struct ExportedTensor {
  std::vector<std::string> names;  // its state_dict names (a tied weight has several)
  std::vector<int64_t> shape;
  at::ScalarType dtype;
  int64_t offset = 0;
};

// Every parameter and buffer of the export once, by its first state_dict name, laid out one after the other.
std::vector<ExportedTensor> layout(const ExportManifest& manifest, std::map<std::string, size_t>& by_state_name,
                                   int64_t& total) {
  std::vector<ExportedTensor> entries;
  total = 0;
  for (const ChunkSpec& chunk : manifest.chunks) {
    auto add = [&](const std::vector<TensorSpec>& specs, const std::vector<std::vector<std::string>>& names) {
      for (size_t i = 0; i < specs.size(); ++i) {
        if (names[i].empty() || by_state_name.count(names[i][0])) continue;
        by_state_name[names[i][0]] = entries.size();
        entries.push_back({names[i], specs[i].shape, scalar_type(specs[i].dtype), total});
        total += c10::multiply_integers(specs[i].shape);
      }
    };
    add(chunk.parameters, chunk.parameter_state_names);
    add(chunk.buffers, chunk.buffer_state_names);
  }
  return entries;
}

}  // namespace

void export_weights(const ExportManifest& manifest, const std::vector<std::pair<std::string, at::Tensor>>& state,
                    const Schedule& schedule, int replica, Transport& world, const WeightExport& where) {
  std::map<std::string, size_t> by_state_name;
  int64_t total = 0;
  const std::vector<ExportedTensor> entries = layout(manifest, by_state_name, total);
  at::Tensor flat = at::zeros({total}, at::TensorOptions().dtype(at::kDouble));
  for (const auto& [name, tensor] : state) {
    // "stage{S}.{name}" or "stage{S}.buffer.{name}"; pipeline 0 of replica 0 contributes.
    const size_t dot = name.find('.');
    const int stage = std::stoi(name.substr(5, dot - 5));
    if (replica != 0 || stage >= schedule.stages_per_pipeline) continue;
    std::string key = name.substr(dot + 1);
    if (key.starts_with("buffer.")) key = key.substr(7);
    if (key.starts_with("adam_")) continue;
    for (size_t k = 0; k < manifest.chunks.size(); ++k) {
      const ChunkSpec& chunk = manifest.chunks[k];
      auto match = [&](const std::vector<TensorSpec>& specs, const std::vector<std::vector<std::string>>& names) {
        for (size_t i = 0; i < specs.size(); ++i)
          if (specs[i].name == key && !names[i].empty()) {
            // A weight tied across chunks is added once, by its first chunk's holder.
            if (&specs == &chunk.parameters && first_holder(chunk, static_cast<int>(k), static_cast<int>(i)) != int(k))
              return true;
            const ExportedTensor& e = entries[by_state_name.at(names[i][0])];
            flat.narrow(0, e.offset, tensor.numel()).copy_(tensor.detach().reshape({-1}));
            return true;
          }
        return false;
      };
      if (chunk.file == manifest.chunks[schedule.chunk_of_stage(stage)].file &&
          (match(chunk.parameters, chunk.parameter_state_names) || match(chunk.buffers, chunk.buffer_state_names)))
        break;
    }
  }
  collective(world, where.last_step, "gathering the trained weights",
             [&] { world.all_reduce_sum(flat, where.timeout); });
  if (world.rank() != 0) return;
  c10::Dict<std::string, at::Tensor> weights;
  for (const ExportedTensor& e : entries) {
    const at::Tensor value = flat.narrow(0, e.offset, c10::multiply_integers(e.shape)).reshape(e.shape).to(e.dtype);
    for (const std::string& n : e.names) weights.insert(n, value);
  }
  const std::vector<char> bytes = torch::pickle_save(c10::IValue(weights));
  write_text_file(where.path, std::string(bytes.begin(), bytes.end()));
  if (!where.quiet)
    fmt::print("weights: {} tensors by their state_dict names in {} (torch.load, then model.load_state_dict)\n",
               weights.size(), where.path);
}

}  // namespace flexpipe::runtime
