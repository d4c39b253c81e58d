// The operator interface's shared parts, and building a graph node's operator from its registered kind.
#include "builtin_model/operators.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "builtin_model/operator_kinds.h"

namespace flexpipe::runtime {

namespace {

uint64_t node_seed(uint64_t seed, int node) { return seed * 1000003ULL + static_cast<uint64_t>(node) * 7919ULL + 1; }

size_t inputs_of(const CostGraph& graph, int node) {
  size_t inputs = 0;
  for (const TensorEdge& e : graph.edges) inputs += e.to == node;
  return inputs;
}

}  // namespace

int64_t Saved::bytes() const {
  int64_t total = 0;
  for (const at::Tensor& t : tensors) total += tensor_bytes(t);
  return total;
}

void Operator::add_parameter(at::Tensor value) {
  gradients_.push_back(at::zeros_like(value));
  parameters_.push_back(std::move(value));
}

void Operator::place(c10::Device device) {
  for (at::Tensor& p : parameters_) p = p.to(device);
  for (at::Tensor& g : gradients_) g = g.to(device);
}

void Operator::accumulate(size_t parameter, const at::Tensor& gradient) { gradients_[parameter].add_(gradient); }

std::vector<at::Tensor> initial_parameters(const CostGraph& graph, int node, const OperatorShape& shape, uint64_t seed,
                                           at::ScalarType dtype) {
  const OperatorKind& kind = operator_kind(graph.nodes[node]);
  if (!kind.parameters) return {};
  ParameterDraw draw{at::TensorOptions().dtype(dtype), at::detail::createCPUGenerator(node_seed(seed, node))};
  return kind.parameters({graph.nodes[node], shape, inputs_of(graph, node)}, draw);
}

std::unique_ptr<Operator> make_operator(const CostGraph& graph, int node, const OperatorShape& shape, uint64_t seed,
                                        at::ScalarType dtype) {
  const OperatorKind& kind = operator_kind(graph.nodes[node]);
  return kind.make({graph.nodes[node], shape, inputs_of(graph, node)},
                   initial_parameters(graph, node, shape, seed, dtype));
}

}  // namespace flexpipe::runtime
