// The operators of a model, one per cost-graph node, with hand-written backward passes split the way
// pipeline schedules need: backward_input (I) computes only input gradients; backward_weight (W)
// computes only parameter gradients, possibly much later. Each forward states what it saves in an
// explicit `Saved`, which the executor owns per (stage, micro-batch): it can drop it (recompute),
// copy it to host memory and back (offload), or free it once the backward is done.
//
// Why not the autograd engine: libtorch's public C++ API has no saved-tensor hooks, so offload and
// per-operator memory decisions would be out of reach; explicit passes also make I and W exact by
// construction. Every backward here is checked against autograd (reference_model.h, tests).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "flexpipe/costs/cost_graph.h"

namespace flexpipe::runtime {

// The data of one micro-batch: token ids and next-token targets, [b, s] int64; for a captured model,
// its inputs in `forward`'s order and the loss's target (undefined when the loss takes none).
struct MicroBatchData {
  at::Tensor tokens;
  at::Tensor targets;
  std::vector<at::Tensor> inputs;
};

// A tensor's data in bytes; 0 when it is undefined.
inline int64_t tensor_bytes(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.nbytes()) : 0; }

// What one operator's forward keeps for its backward.
struct Saved {
  std::vector<at::Tensor> tensors;
  int64_t bytes() const;
};

class Operator {
 public:
  virtual ~Operator() = default;
  const std::string& name() const { return name_; }
  const std::string& kind() const { return kind_; }
  std::vector<at::Tensor>& parameters() { return parameters_; }
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  // Same shapes as parameters(); accumulated by backward_weight, zeroed by the optimizer step.
  std::vector<at::Tensor>& gradients() { return gradients_; }
  const std::vector<at::Tensor>& gradients() const { return gradients_; }
  bool has_parameters() const { return !parameters_.empty(); }
  // Moves the parameters and their gradients to `device` (drawn on the host, so that every device
  // starts from the same values).
  void place(c10::Device device);

  virtual at::Tensor forward(const std::vector<at::Tensor>& inputs, const MicroBatchData& data, Saved& saved) const = 0;
  // One gradient per input (undefined where an input needs none). Never touches gradients().
  virtual std::vector<at::Tensor> backward_input(const at::Tensor& grad_output, const Saved& saved) const = 0;
  // Adds this micro-batch's parameter gradients to gradients().
  virtual void backward_weight(const at::Tensor& /*grad_output*/, const Saved& /*saved*/) {}

 protected:
  Operator(std::string name, std::string kind) : name_(std::move(name)), kind_(std::move(kind)) {}
  // Registers a parameter and its zeroed gradient.
  void add_parameter(at::Tensor value);
  void accumulate(size_t parameter, const at::Tensor& gradient);

 private:
  std::string name_, kind_;
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> gradients_;
};

// Sizes the operators need beyond what the graph node says.
struct OperatorShape {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t max_positions = 0;
  int64_t kv_heads = 0;        // key/value heads (grouped-query attention when below heads)
  bool gated_mlp = false;      // SwiGLU: fc1 makes the gate and the value, 2 x ffn_hidden
  double rotary_base = 10000;  // rotary positions: angle of pair i at position t is t / base^(2i / head_dim)

  int64_t head_dim() const { return hidden / heads; }
  int64_t qkv_width() const { return (heads + 2 * kv_heads) * head_dim(); }
};

// The operator of graph node `node` (its kind and role's entry in operator_kinds.h), parameters drawn
// from a generator seeded by (seed, node index), so that every rank and the single-process reference
// build identical weights. Throws Error for a node kind the runtime cannot execute.
std::unique_ptr<Operator> make_operator(const CostGraph& graph, int node, const OperatorShape& shape, uint64_t seed,
                                        at::ScalarType dtype);

// Initial values of node `node`'s parameters (in parameters() order), as make_operator draws them.
std::vector<at::Tensor> initial_parameters(const CostGraph& graph, int node, const OperatorShape& shape, uint64_t seed,
                                           at::ScalarType dtype);

}  // namespace flexpipe::runtime
