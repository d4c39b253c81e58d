// From (cost graph, partition, per-operator memory decisions, shape, data types) to the stage cost
// table the simulator reads. Semantics and formulas: docs/cost-graph.md, "Per-stage aggregation".
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/cost_table.h"

namespace flexpipe {

// Which operators' nodes go to which stage (model chunk), in pipeline order.
struct Partition {
  int num_stages = 0;
  std::vector<int> stage_of_node;  // one per graph node
  friend bool operator==(const Partition&, const Partition&) = default;
};

// Contiguous operator ranges: stage k holds the next operators_per_stage[k] nodes in graph order
// (zero makes an empty stage). The counts must add up to the number of nodes.
Partition partition_from_sizes(const CostGraph& graph, std::span<const int> operators_per_stage);
// Contiguous operator ranges by boundaries: stage k holds operators [starts[k], starts[k + 1]); starts
// runs from 0 to the number of nodes (PartitionResult::starts's form).
Partition partition_from_starts(const CostGraph& graph, std::span<const int> starts);
// The other way: how many operators each stage holds, in stage order (a contiguous partition's sizes).
std::vector<int> operators_per_stage(const Partition& partition);
// A contiguous partition's boundaries: the first operator of each stage, then the operator count
// (PartitionResult::starts's form).
std::vector<int> stage_starts(const Partition& partition);
// Contiguous layer ranges: stage k holds the next layers_per_stage[k] layers of graph.layers.
// Every node must carry a layer.
Partition partition_from_layer_counts(const CostGraph& graph, std::span<const int> layers_per_stage);
// Explicit sets: stage k holds exactly the named nodes; every node in exactly one stage.
Partition partition_from_sets(const CostGraph& graph, const std::vector<std::vector<std::string>>& stage_nodes);
// Balanced by transformer layers: the first stage also takes what precedes the first transformer layer
// (the embedding), the last what follows the last one (final norm, head, loss).
Partition partition_evenly(const CostGraph& graph, int num_stages);
// Throws Error when a tensor flows from a later stage back to an earlier one (naming the edge).
void check_partition(const CostGraph& graph, const Partition& partition);

enum class MemoryDecision : uint8_t { Keep, Recompute, Offload };
const char* memory_decision_name(MemoryDecision decision);

// Recompute segments: runs of recomputed operators of one stage and one layer, consecutive in graph
// order (the granularity of Megatron's full recompute; a whole backward rebuilds one at a time).
// Per node, the first node of its segment, or -1 when the node is not recomputed. decisions has one
// entry per node. The partitioner's memory model applies the same rule on its operator table
// (stage_memory.cpp, continues_segment), where decisions change one operator at a time.
std::vector<int> recompute_segments(const CostGraph& graph, const Partition& partition,
                                    std::span<const MemoryDecision> decisions);

struct AggregationOptions {
  Shape shape;                            // micro-batch size and sequence length
  std::vector<MemoryDecision> decisions;  // per node; empty: keep everything
  // Per stage: OFFLOAD moves the recompute checkpoints too (with what the operators offload), and
  // RELOAD brings them back right before R (add_memory_actions' reload_before_recompute). Empty: none.
  std::vector<char> offload_checkpoints;
  double parameter_bytes = 2;           // per parameter: bf16 weights
  double gradient_bytes = 2;            // per parameter: bf16 gradients
  double optimizer_bytes = 12;          // per parameter: Adam's fp32 master copy, m and v
  Link device_link;                     // between devices of a node (bytes per time unit)
  int devices_per_node = 0;             // 0: one node; else CostTable::devices_per_node
  Link inter_node_link;                 // between devices of different nodes
  Link host_link;                       // device <-> host, for offloading
  std::vector<double> memory_capacity;  // copied into the table
};

// What the table has no field for.
struct StageDetails {
  int operators = 0;
  double parameters = 0;  // held by the stage (a tied copy counts where it is used)
  double forward_flops = 0;
  double input_bytes = 0;  // what the previous stage sends (its output_bytes)
  // Part of input_bytes the stage holds until the backward ends besides what its operators save:
  // tensors it carries through to later stages, or whose readers here save nothing (counted in
  // activation_bytes, or in checkpoint_bytes where the stage recomputes)
  double held_input_bytes = 0;
  double workspace_bytes = 0;  // largest transient buffer of one operator
  double offload_bytes = 0;    // saved bytes of operators decided Offload, per micro-batch, and the
                               // checkpoints where the stage offloads them
  double offload_time = 0;     // one direction over the host link
};

struct StageAggregate {
  CostTable table;
  std::vector<StageDetails> details;
};

StageAggregate aggregate_stages(const CostGraph& graph, const Partition& partition, const AggregationOptions& options);

}  // namespace flexpipe
