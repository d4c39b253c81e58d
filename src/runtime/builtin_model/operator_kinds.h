// The registry of the built-in operator kinds: for each (kind, role) of a cost-graph node, the operator
// that runs it, its initial parameters, the shape of its output, the autograd computation the
// single-process reference checks it against, and how its time scales. Every use of a node's kind in
// the runtime asks here; a new kind is one entry (docs/architecture.md, "Add a new operator kind").
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include "builtin_model/operators.h"
#include "flexpipe/costs/cost_graph.h"

namespace flexpipe::runtime {

// What a kind's functions know of the node they serve.
struct OperatorSite {
  const OperatorNode& node;
  const OperatorShape& shape;
  size_t inputs = 0;  // tensors the node reads (edges into it)
};

// Draws a node's initial parameters from its own generator, so that every rank and the reference
// draw the same values (operators.h, initial_parameters).
struct ParameterDraw {
  at::TensorOptions options;
  at::Generator generator;
  at::Tensor normal(at::IntArrayRef sizes);  // N(0, 0.02), GPT-2's initialisation
};

// One micro-batch's values for a node's reference computation (reference_model.h).
struct ReferenceInputs {
  const std::vector<at::Tensor>& inputs;  // its producers' outputs, in operator input order
  const std::vector<at::Tensor>& parameters;
  const MicroBatchData& data;
  const OperatorShape& shape;
};

struct OperatorKind {
  std::string_view kind;  // OperatorNode::kind
  std::string_view role;  // OperatorNode::role; empty: any role
  // The node's parameters in the operator's order, drawn in that order; unset: none.
  std::function<std::vector<at::Tensor>(const OperatorSite&, ParameterDraw&)> parameters;
  // The operator running the node, holding `parameters`.
  std::function<std::unique_ptr<Operator>(const OperatorSite&, std::vector<at::Tensor> parameters)> make;
  // Its output for one micro-batch of b sequences of s tokens (empty: a scalar).
  std::function<std::vector<int64_t>(const OperatorShape&, int64_t b, int64_t s)> output_shape;
  // Its output through libtorch's differentiable operators.
  std::function<at::Tensor(const ReferenceInputs&)> reference;
  // Its time grows with the square of the sequence length (attention maps), linearly otherwise: the
  // scaling the profiler gives its measurement (profiler.h).
  bool quadratic_in_sequence = false;
};

// Every built-in kind, each (kind, role) once.
const std::vector<OperatorKind>& operator_kinds();

// The entry of `node`'s kind and role; throws Error naming the node when the runtime has none.
const OperatorKind& operator_kind(const OperatorNode& node);

}  // namespace flexpipe::runtime
