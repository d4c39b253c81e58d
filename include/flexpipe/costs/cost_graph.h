// A fine-grained cost graph: operators (not layers) with forward, input-gradient and weight-gradient
// costs, the bytes they save for the backward, and the tensors that flow between them. Stage cuts may
// fall anywhere, inside a transformer block included, and memory decisions are taken per operator.
// File format: docs/cost-graph.md (JSON, "format": "flexpipe-cost-graph", "version": 1).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flexpipe/costs/cost_table.h"

namespace flexpipe {

// A quantity that depends on the micro-batch size b and the sequence length s:
//   fixed + per_sample*b + per_token*b*s + per_token_seq*b*s^2.
// Every FLOP and byte count of a transformer is exactly of this form (linear layers scale with b*s,
// attention scores with b*s^2, a pooler with b, parameters not at all).
struct ShapePolynomial {
  double fixed = 0;
  double per_sample = 0;
  double per_token = 0;
  double per_token_seq = 0;

  double at(double microbatch_size, double seq_len) const {
    return fixed + microbatch_size * (per_sample + seq_len * (per_token + seq_len * per_token_seq));
  }
  bool is_zero() const { return fixed == 0 && per_sample == 0 && per_token == 0 && per_token_seq == 0; }
  ShapePolynomial& operator+=(const ShapePolynomial& other);
  friend ShapePolynomial operator+(ShapePolynomial a, const ShapePolynomial& b) { return a += b; }
  friend ShapePolynomial operator*(double factor, ShapePolynomial p);
  friend bool operator==(const ShapePolynomial&, const ShapePolynomial&) = default;
};

// Constructors that read like the formulas they encode.
inline ShapePolynomial fixed_amount(double value) { return {value, 0, 0, 0}; }
inline ShapePolynomial per_sample(double value) { return {0, value, 0, 0}; }
inline ShapePolynomial per_token(double value) { return {0, 0, value, 0}; }
inline ShapePolynomial per_token_seq(double value) { return {0, 0, 0, value}; }

// One pass of an operator: its time at the graph's reference shape, and its FLOPs and bytes moved
// (HBM traffic) as functions of the shape.
struct PassCost {
  double time = 0;
  ShapePolynomial flops;
  ShapePolynomial bytes;
  friend bool operator==(const PassCost&, const PassCost&) = default;
};

enum class Pass : uint8_t { Forward, BackwardInput, BackwardWeight };

// How an operator's times change with the shape.
//   Roofline: time(b,s) = time_ref * roof(b,s) / roof(b0,s0), roof = max(flops/flop_rate, bytes/byte_rate)
//             with the graph's rates: exact for FLOP- and byte-derived costs.
//   Power:    time(b,s) = time_ref * (b/b0)^batch_exponent * (s/s0)^sequence_exponent: for measured
//             times (profiles) where only the trend is known.
enum class ScalingRule : uint8_t { Roofline, Power };

struct Scaling {
  ScalingRule rule = ScalingRule::Roofline;
  double batch_exponent = 1;     // Power only
  double sequence_exponent = 1;  // Power only
  friend bool operator==(const Scaling&, const Scaling&) = default;
};

// What a layer is to Megatron's layout string: E, t, m, L (anchors.md §2.2). Other: none of them.
enum class LayerRole : uint8_t { Embedding, Transformer, Mtp, Loss, Other };

struct LayerInfo {
  std::string name;
  LayerRole role = LayerRole::Other;
  friend bool operator==(const LayerInfo&, const LayerInfo&) = default;
};

inline constexpr int kNoLayer = -1;
inline constexpr int kNotTied = -1;

// A buffer or tensor constant an operator holds (a capture's BatchNorm statistics, a mask, an index):
// static memory like parameters, but never trained (no gradient, no optimizer state). Operators list
// the buffers they read; one read by several operators of a stage is held there once (by name).
struct BufferUse {
  std::string name;
  double bytes = 0;       // at the captured types
  bool unscaled = false;  // not of the captured floating type (an integer index): keeps its size
  friend bool operator==(const BufferUse&, const BufferUse&) = default;
};

struct OperatorNode {
  std::string name;
  std::string kind;  // "linear", "layernorm", "softmax", ...: free text for reports
  // What the operator does in its layer where its kind alone does not say ("qkv", "fc1", "lm_head",
  // "position", "scores"): the runtime's built-in operators take their shapes from it. Empty when unknown.
  std::string role;
  int layer = kNoLayer;          // index into CostGraph::layers
  double parameters = 0;         // count; bytes come from the data type chosen at aggregation
  double active_parameters = 0;  // used per token (MoE experts: top-k of them); equals parameters otherwise
  int tied_to = kNotTied;        // shares its parameters with that earlier node (tied embeddings)
  Scaling scaling;
  PassCost forward;
  PassCost backward_input;         // gradient with respect to the inputs (I)
  PassCost backward_weight;        // gradient with respect to the parameters (W)
  ShapePolynomial saved_bytes;     // kept by the forward for the backward
  ShapePolynomial freed_by_input;  // part of saved_bytes released when I ends; the rest when W ends
  // Part of saved_bytes that is the very tensors the previous node saves too (softmax and the P V
  // product both save the probabilities). The previous node must feed this one, in the same layer
  // (so the partitioner's layers choose independently). Held once while
  // both nodes keep what they save, both offload it, or both rebuild it in one recompute segment;
  // released when neither node holds it any more.
  ShapePolynomial shared_saved_bytes;
  // Part of saved_bytes in tensors not of the captured floating type (max-pool indices and class
  // targets in integers, a double scalar): they keep their size when the model trains in another
  // floating type than it was captured in.
  ShapePolynomial unscaled_saved_bytes;
  // Part of saved_bytes that is the operator's own output (a ReLU, a sigmoid, a softmax save it): kept,
  // the operator holds the very tensor a recomputed reader checkpoints.
  ShapePolynomial saved_output_bytes;
  ShapePolynomial output_bytes;     // the operator's full output
  ShapePolynomial workspace_bytes;  // transient, during its own passes only
  std::vector<BufferUse> buffers;   // the buffers and constants it reads, each name once
  std::string note;                 // free text for reports: why a cost is missing or approximate
  friend bool operator==(const OperatorNode&, const OperatorNode&) = default;
};

// A tensor read by `to` from `from`. Edges from one producer carry its whole output or disjoint parts
// of it: what crosses a cut from one producer is the smaller of its output and the sum of its edges.
struct TensorEdge {
  int from = 0;
  int to = 0;
  ShapePolynomial bytes;
  // The bytes of this very tensor (its storage) that `to` saves for its backward and counts in its own
  // saved_bytes, where the graph knows it (a capture does); unknown, the reader is taken to save what it
  // reads. A ReLU saves its output, not its input (0); a linear layer its input (all of it).
  std::optional<ShapePolynomial> saved_bytes = std::nullopt;
  bool unscaled = false;  // not of the captured floating type (token ids, a mask): keeps its size
  friend bool operator==(const TensorEdge&, const TensorEdge&) = default;
};

// Effective (achievable) rates of the device the times were computed for, per time unit.
struct RooflineRates {
  std::string name;
  double flop_rate = 0;  // FLOP per time unit
  double byte_rate = 0;  // bytes per time unit
  friend bool operator==(const RooflineRates&, const RooflineRates&) = default;
};

struct Shape {
  double microbatch_size = 1;
  double seq_len = 1;
  friend bool operator==(const Shape&, const Shape&) = default;
};

// One input of a captured model's forward: its shape (the first dimension is the micro-batch), its
// PyTorch data type name ("float32", "int64", ...) and, when given by name, forward's argument name.
struct CapturedInput {
  std::vector<int64_t> shape;
  std::string dtype;
  std::string name;  // empty: by position
  friend bool operator==(const CapturedInput&, const CapturedInput&) = default;
};

// A module `flexpipe capture` could not trace into operators and kept as one.
struct KeptWholeModule {
  std::string module;
  std::string reason;
  friend bool operator==(const KeptWholeModule&, const KeptWholeModule&) = default;
};

// Where a captured graph came from (docs/capture.md): enough to rebuild the model (the file, the
// factory, the inputs, the loss) and to judge its times (threads, runs per median, PyTorch version).
struct CaptureRecord {
  std::string file;     // empty when captured from Python with capture() directly
  std::string factory;  // a function in `file` returning the nn.Module
  std::vector<CapturedInput> inputs;
  std::string loss;  // cross_entropy, mse, none, custom
  int threads = 0;
  int warmup = 0;
  int repeats = 0;    // 0: not timed
  std::string clock;  // "wall", or "cpu" (the measuring thread's CPU time)
  std::string torch_version;
  std::string tracer;  // "fx" or "export" (torch.export); empty in graphs captured before there was a choice
  std::string dtype;   // the captured floating type ("float32"); empty: the first floating input's
  std::vector<KeptWholeModule> kept_whole;
  friend bool operator==(const CaptureRecord&, const CaptureRecord&) = default;
};

// Nodes are stored in a topological order (every edge goes from a lower to a higher index); that
// order is the one "contiguous operator ranges" refer to.
struct CostGraph {
  std::string name;
  std::string time_unit = "ms";
  Shape reference;                        // the shape the stored times are for
  std::optional<RooflineRates> hardware;  // needed by Roofline nodes
  // The transport between two ranks of the machine the graph was measured on (`flexpipe profile
  // --transport`), in time_unit and bytes; absent: the caller's link, or a free one.
  std::optional<Link> link;
  std::vector<LayerInfo> layers;
  std::vector<OperatorNode> nodes;
  std::vector<TensorEdge> edges;
  std::optional<CaptureRecord> capture;  // set by `flexpipe capture`
  friend bool operator==(const CostGraph&, const CostGraph&) = default;
};

const PassCost& pass_cost(const OperatorNode& node, Pass pass);
// The node's time for one pass at shape (b, s), by its scaling rule.
double operator_time(const CostGraph& graph, const OperatorNode& node, Pass pass, const Shape& shape);
// max(flops / flop_rate, bytes / byte_rate) at the given shape.
double roofline_time(const PassCost& cost, const RooflineRates& rates, const Shape& shape);

// Parameters counted once (tied copies excluded), and those used per token.
double total_parameters(const CostGraph& graph);
double total_active_parameters(const CostGraph& graph);

// The graph with every activation byte count (saved, shared, freed, output, workspace and edge bytes)
// times `factor`, times and FLOPs unchanged: a model captured in float32 and trained in float64 holds
// twice the bytes. Saved tensors of other types (unscaled_saved_bytes) keep their size; buffers of
// the captured floating type scale too.
CostGraph with_activation_bytes_scaled(CostGraph graph, double factor);
// The bytes of the buffers these operators hold, each name once.
double buffer_bytes(const std::vector<const OperatorNode*>& nodes);
// Bytes per element of the floating type a captured graph's activations were measured in: the capture
// record's dtype, else (graphs from before it was recorded) that of its first floating-point input,
// else 4 (a model of float32 parameters fed integer tokens).
double captured_element_bytes(const CaptureRecord& capture);

int find_node(const CostGraph& graph, const std::string& name);  // -1 when absent
// The nodes of one directed cycle among `edges` over `num_nodes` nodes, in edge order; empty when the
// edges form a DAG.
std::vector<int> find_cycle(int num_nodes, const std::vector<TensorEdge>& edges);
const char* layer_role_name(LayerRole role);  // "embedding", "transformer", "mtp", "loss", "other"

// Checks the invariants every consumer relies on; throws Error starting with `origin` and naming the
// node, edge or layer at fault: unique names, valid indices, no self-loops or duplicate edges, no cycle
// (the cycle is spelled out), nodes in topological order, freed_by_input <= saved_bytes at the
// reference shape, shared_saved_bytes at most what the node and the previous one (which must feed it)
// save, unscaled_saved_bytes and saved_output_bytes at most saved_bytes (the latter also at most
// output_bytes), an edge's saved_bytes at most its bytes and together
// at most what their reader saves, hardware present when a node scales by roofline.
void validate_cost_graph(const CostGraph& graph, const std::string& origin);

}  // namespace flexpipe
