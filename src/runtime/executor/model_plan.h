// A trainable model cut into chunks: the cost graph, each node's inputs, and what crosses each cut.
// Shared by the executor (which builds the operators of its own stages only) and the single-process
// reference (which builds all of them).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "builtin_model/operators.h"
#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "scripted_model/scripted_model.h"

namespace flexpipe::runtime {

struct ModelPlan {
  CostGraph graph;
  OperatorShape shape;
  std::vector<std::vector<int>> inputs;    // per node: producers, in operator input order
  Partition partition;                     // chunk of each node
  std::vector<int> starts;                 // first node of each chunk; starts.back() == node count
  std::vector<std::vector<int>> crossing;  // per chunk: nodes whose output enters it (boundary_tensors)
  int microbatch_size = 1;
  int seq_len = 1;
  at::ScalarType dtype = at::kFloat;
  uint64_t seed = 0;
  // A captured model (flexpipe capture, flexpipe export): the graph is its cost graph, the partition
  // the plan's, and the chunks are these TorchScript modules instead of the runtime's operators.
  std::shared_ptr<const ExportManifest> scripted;

  int num_chunks() const { return partition.num_stages; }
  int loss_node() const { return static_cast<int>(graph.nodes.size()) - 1; }
};

// Throws Error when the model is not trainable or the partition does not fit the graph.
ModelPlan make_model_plan(const ModelConfig& config, const Partition& partition, int microbatch_size,
                          at::ScalarType dtype, uint64_t seed);

// A captured model exported into `export_dir` for `partition` of `graph` (the plan's operator ranges):
// throws Error when the export is for another graph, plan or dtype.
ModelPlan make_scripted_plan(const CostGraph& graph, const Partition& partition, const std::string& export_dir,
                             at::ScalarType dtype, uint64_t seed);

// The operators of one chunk, nodes [begin, end): one copy per stage holding the chunk.
struct ChunkModule {
  int chunk = 0;
  int begin = 0;
  int end = 0;
  std::vector<std::unique_ptr<Operator>> operators;  // operators[i] is node begin + i

  Operator& op(int node) { return *operators[node - begin]; }
  bool holds(int node) const { return node >= begin && node < end; }
};
ChunkModule make_chunk_module(const ModelPlan& plan, int chunk);

// The shape of node `node`'s output for one micro-batch.
std::vector<int64_t> output_shape(const ModelPlan& plan, int node);

// The synthetic data (DataSource::synthetic with the plan's vocabulary and seed) of a training step.
std::vector<MicroBatchData> make_batch(const ModelPlan& plan, int microbatches, int step);

}  // namespace flexpipe::runtime
