// Small DAG cost graphs with skip connections, the shapes a captured ResNet or U-Net has, for the
// tests of the aggregation and the partitioner. Every amount is fixed (no shape dependence) and every
// edge carries its producer's whole output, so per-stage figures can be worked out by hand.
#pragma once
#include <initializer_list>
#include <string>
#include <utility>

#include "flexpipe/costs/cost_graph.h"

namespace flexpipe::test {

struct DagNode {
  const char* name;
  const char* kind;
  double forward;     // time; the input gradient takes twice as long, the weight gradient as long
  double parameters;  // count
  double saved;       // bytes kept for the backward
  double output;      // bytes of its output
};

// Nodes in topological order, each in the layer `layer_of` names, and edges (from, to) by index.
inline CostGraph dag_graph(const std::string& name, std::initializer_list<DagNode> nodes,
                           std::initializer_list<const char*> layer_names, std::initializer_list<int> layer_of,
                           std::initializer_list<std::pair<int, int>> edges) {
  CostGraph g;
  g.name = name;
  g.reference = {1, 1};
  for (const char* layer : layer_names) g.layers.push_back({layer, LayerRole::Other});
  auto layer = layer_of.begin();
  for (const DagNode& n : nodes) {
    OperatorNode node;
    node.name = n.name;
    node.kind = n.kind;
    node.layer = *layer++;
    node.scaling = {ScalingRule::Power, 1, 0};
    node.forward.time = n.forward;
    node.backward_input.time = 2 * n.forward;
    node.backward_weight.time = n.parameters > 0 ? n.forward : 0;
    node.parameters = node.active_parameters = n.parameters;
    node.saved_bytes = fixed_amount(n.saved);
    // Operators with parameters keep what they saved until W; the others release it at I.
    node.freed_by_input = fixed_amount(n.parameters > 0 ? 0 : n.saved);
    node.output_bytes = fixed_amount(n.output);
    g.nodes.push_back(node);
  }
  for (auto [from, to] : edges) g.edges.push_back({from, to, g.nodes[from].output_bytes});
  validate_cost_graph(g, name);
  return g;
}

// A ResNet basic block between a stem and a head: x = stem(input); relu(bn2(conv2(relu(bn1(conv1(x)))))
// + x). The residual stem -> add skips six operators; add saves nothing for its backward.
inline CostGraph residual_block_graph() {
  return dag_graph("resnet-block",
                   {{"stem", "conv", 2, 1, 3, 10},
                    {"conv1", "conv", 4, 2, 10, 6},
                    {"bn1", "batchnorm", 1, 1, 6, 6},
                    {"relu1", "relu", 1, 0, 6, 6},
                    {"conv2", "conv", 4, 2, 6, 10},
                    {"bn2", "batchnorm", 1, 1, 10, 10},
                    {"add", "add", 1, 0, 0, 10},
                    {"relu2", "relu", 1, 0, 10, 10},
                    {"head", "linear", 2, 1, 10, 1}},
                   {"stem", "block", "head"}, {0, 1, 1, 1, 1, 1, 1, 1, 2},
                   {{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}, {0, 6}, {6, 7}, {7, 8}});
}

// A two-level U-Net: in -> enc1 -> down1 -> enc2 -> down2 -> mid -> up2 -> cat2(up2, enc2) -> dec2
// -> up1 -> cat1(up1, enc1) -> dec1 -> head. The skips enc1 -> cat1 (8 bytes, over eight operators)
// and enc2 -> cat2 (4 bytes) cross every cut between them; the concatenations save nothing.
inline CostGraph unet_graph() {
  return dag_graph("unet",
                   {{"in", "conv", 1, 1, 2, 8},
                    {"enc1", "conv", 3, 2, 8, 8},
                    {"down1", "maxpool", 1, 0, 8, 4},
                    {"enc2", "conv", 3, 2, 4, 4},
                    {"down2", "maxpool", 1, 0, 4, 2},
                    {"mid", "conv", 2, 2, 2, 2},
                    {"up2", "upsample", 1, 0, 2, 4},
                    {"cat2", "cat", 1, 0, 0, 8},
                    {"dec2", "conv", 3, 2, 8, 4},
                    {"up1", "upsample", 1, 0, 4, 8},
                    {"cat1", "cat", 1, 0, 0, 16},
                    {"dec1", "conv", 3, 2, 16, 8},
                    {"head", "conv", 1, 1, 8, 1}},
                   {"level1", "level2", "bottom", "level2-up", "level1-up"}, {0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4, 4, 4},
                   {{0, 1},
                    {1, 2},
                    {2, 3},
                    {3, 4},
                    {4, 5},
                    {5, 6},
                    {6, 7},
                    {3, 7},
                    {7, 8},
                    {8, 9},
                    {9, 10},
                    {1, 10},
                    {10, 11},
                    {11, 12}});
}

}  // namespace flexpipe::test
