// Building the plan of a built-in or a captured model: its graph, the chunks' operator ranges and cuts.
#include "executor/model_plan.h"

#include "builtin_model/data_source.h"
#include "builtin_model/operator_kinds.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/train/trainable_model.h"

namespace flexpipe::runtime {

namespace {

// A split backward keeps a piece's whole autograd graph from I to W when the piece trains a parameter
// (differentiate), so what its operators saved is released when W ends, not at I as the capture
// writes for operators without parameters: the simulator holds it as the runtime does. The loss (the
// last chunk's range ends with it) is differentiated whole at I.
void release_at_weight_gradient(CostGraph& graph, const ExportManifest& manifest) {
  for (const ChunkSpec& chunk : manifest.chunks)
    for (const PieceSpec& piece : chunk.pieces) {
      if (!piece.trains) continue;
      const int first = find_node(graph, piece.first), last = find_node(graph, piece.last);
      if (first < 0 || last < first) continue;  // an older manifest: the capture's release stands
      for (int node = first; node <= last; ++node) {
        OperatorNode& op = graph.nodes[node];
        const bool loss = op.layer != kNoLayer && graph.layers[op.layer].role == LayerRole::Loss;
        if (!loss) op.freed_by_input = ShapePolynomial{};
      }
    }
}

}  // namespace

ModelPlan make_model_plan(const ModelConfig& config, const Partition& partition, int microbatch_size,
                          at::ScalarType dtype, uint64_t seed) {
  if (microbatch_size < 1) throw Error(fmt::format("micro-batch size must be positive (got {})", microbatch_size));
  ModelPlan plan;
  plan.graph = trainable_graph(config, microbatch_size, "H100-80GB", dtype == at::kDouble ? 8 : 4);
  if (partition.stage_of_node.size() != plan.graph.nodes.size())
    throw Error(fmt::format("partition covers {} operators but {} has {}", partition.stage_of_node.size(),
                            plan.graph.name, plan.graph.nodes.size()));
  plan.shape.hidden = config.hidden;
  plan.shape.heads = config.heads;
  plan.shape.ffn_hidden = config.ffn_hidden;
  plan.shape.vocab = config.vocab;
  plan.shape.max_positions = config.max_positions;
  plan.shape.kv_heads = config.kv_heads;
  plan.shape.gated_mlp = config.mlp == MlpKind::SwiGlu;
  plan.inputs = operator_inputs(plan.graph);
  plan.partition = partition;
  plan.starts = chunk_starts(partition);
  plan.crossing = boundary_tensors(plan.graph, partition);
  for (int k = 0; k < partition.num_stages; ++k)
    if (plan.starts[k] == plan.starts[k + 1])
      throw Error(
          fmt::format("partition: model chunk {} holds no operator; the runtime needs at least one per chunk", k));
  plan.microbatch_size = microbatch_size;
  plan.seq_len = config.seq_len;
  plan.dtype = dtype;
  plan.seed = seed;
  return plan;
}

ModelPlan make_scripted_plan(const CostGraph& graph, const Partition& partition, const std::string& export_dir,
                             at::ScalarType dtype, uint64_t seed) {
  auto manifest = std::make_shared<ExportManifest>(read_export_manifest(export_dir));
  const std::string where = export_dir + "/manifest.json";
  if (manifest->graph != graph.name || manifest->graph_operators != static_cast<int>(graph.nodes.size()))
    throw Error(fmt::format("{}: exported from '{}' with {} operators, but the model is '{}' with {}: export again",
                            where, manifest->graph, manifest->graph_operators, graph.name, graph.nodes.size()));
  if (partition.stage_of_node.size() != graph.nodes.size())
    throw Error(fmt::format("partition covers {} operators but {} has {}", partition.stage_of_node.size(), graph.name,
                            graph.nodes.size()));
  if (static_cast<int>(manifest->chunks.size()) != partition.num_stages)
    throw Error(fmt::format("{}: {} chunks, but the plan has {} stages: export again with this plan", where,
                            manifest->chunks.size(), partition.num_stages));
  const std::vector<int> starts = chunk_starts(partition);
  for (int k = 0; k < partition.num_stages; ++k) {
    const ChunkSpec& c = manifest->chunks[k];
    const int begin = starts[k], end = starts[k + 1];
    if (c.operators != end - begin || graph.nodes[begin].name != c.first || graph.nodes[end - 1].name != c.last)
      throw Error(
          fmt::format("{}: chunk {} holds {} operators, {} to {}, but the plan's stage {} holds {}, {} to {}: "
                      "export again with this plan",
                      where, k, c.operators, c.first, c.last, k, end - begin, graph.nodes[begin].name,
                      graph.nodes[end - 1].name));
  }
  if (scalar_type(manifest->dtype) != dtype)
    throw Error(fmt::format("{}: exported in {}, but training runs in {}: export with --dtype {} (or train in {})",
                            where, c10::toString(scalar_type(manifest->dtype)), c10::toString(dtype),
                            dtype == at::kDouble ? "float64" : "float32",
                            manifest->dtype == ElementType::Float64 ? "float64" : "float32"));
  ModelPlan plan;
  // The capture measured activations in its own floating type; the memory report and model use the
  // training one.
  const double element_bytes = dtype == at::kDouble ? 8 : 4;
  const double captured_bytes = graph.capture ? captured_element_bytes(*graph.capture) : element_bytes;
  plan.graph =
      captured_bytes == element_bytes ? graph : with_activation_bytes_scaled(graph, element_bytes / captured_bytes);
  release_at_weight_gradient(plan.graph, *manifest);
  plan.partition = partition;
  plan.starts = starts;
  plan.crossing.resize(partition.num_stages);
  plan.microbatch_size = graph.reference.microbatch_size;
  plan.seq_len = 1;
  plan.dtype = dtype;
  plan.seed = seed;
  plan.scripted = std::move(manifest);
  return plan;
}

ChunkModule make_chunk_module(const ModelPlan& plan, int chunk) {
  ChunkModule module;
  module.chunk = chunk;
  module.begin = plan.starts[chunk];
  module.end = plan.starts[chunk + 1];
  for (int node = module.begin; node < module.end; ++node)
    module.operators.push_back(make_operator(plan.graph, node, plan.shape, plan.seed, plan.dtype));
  return module;
}

std::vector<int64_t> output_shape(const ModelPlan& plan, int node) {
  return operator_kind(plan.graph.nodes[node]).output_shape(plan.shape, plan.microbatch_size, plan.seq_len);
}

std::vector<MicroBatchData> make_batch(const ModelPlan& plan, int microbatches, int step) {
  return DataSource::synthetic(plan.shape.vocab, plan.seed)
      .batch(step, 0, microbatches, plan.microbatch_size, plan.seq_len);
}

}  // namespace flexpipe::runtime
