// Importers: PipeDream graph.txt profiles and Megatron pipeline layout strings, with exact errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/interop/megatron_layout.h"
#include "flexpipe/interop/pipedream_import.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

// A branchy profile (node4 joins node2 and node3), listed out of topological order.
const std::string kProfile =
    "node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=4096.0, parameter_size=0.000\n"
    "node4 -- Add(inplace) -- forward_compute_time=0.500, backward_compute_time=0.250, activation_size=[1024.0; 1024.0], parameter_size=0.000\n"
    "node2 -- Linear(in_features=32, out_features=32, bias=True) -- forward_compute_time=1.250, backward_compute_time=2.500, activation_size=2048.0, parameter_size=4224.000\n"
    "node3 -- ReLU() -- forward_compute_time=0.125, backward_compute_time=0.125, activation_size=2048.0, parameter_size=0.000\n"
    "\tnode1 -- node2\n"
    "\tnode1 -- node3\n"
    "\tnode2 -- node4\n"
    "\tnode3 -- node4\n";

std::string error_of(auto&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

std::string profile_error(const std::string& text) {
  return error_of([&] { parse_pipedream_graph(text, "graph.txt"); });
}

TEST(PipeDreamImport, ReadsNodesEdgesAndOrdersThem) {
  const CostGraph graph = parse_pipedream_graph(kProfile, "graph.txt", {.profiled_microbatch_size = 2});
  ASSERT_EQ(graph.nodes.size(), 4u);
  EXPECT_EQ(graph.nodes[0].name, "node1");
  EXPECT_EQ(graph.nodes[1].name, "node2");
  EXPECT_EQ(graph.nodes[2].name, "node3");
  EXPECT_EQ(graph.nodes[3].name, "node4");  // moved after its inputs
  const OperatorNode& linear = graph.nodes[1];
  EXPECT_EQ(linear.kind, "Linear");
  EXPECT_EQ(linear.forward.time, 1.25);
  EXPECT_EQ(linear.backward_input.time, 2.5);  // PipeDream does not split I and W
  EXPECT_EQ(linear.backward_weight.time, 0);
  EXPECT_EQ(linear.parameters, 4224.0 / 4);          // fp32
  EXPECT_EQ(linear.output_bytes, per_sample(1024));  // 2048 bytes at batch 2
  EXPECT_EQ(linear.saved_bytes, linear.output_bytes);
  EXPECT_EQ(graph.nodes[3].output_bytes, per_sample(1024));  // [1024; 1024] summed, per sample
  EXPECT_EQ(linear.scaling, (Scaling{ScalingRule::Power, 1, 0}));
  EXPECT_EQ(graph.reference, (Shape{2, 1}));
  ASSERT_EQ(graph.edges.size(), 4u);
  EXPECT_EQ(graph.edges[2].from, 1);
  EXPECT_EQ(graph.edges[2].to, 3);
  EXPECT_EQ(graph.edges[2].bytes, per_sample(1024));
  // Times scale linearly with the micro-batch.
  EXPECT_EQ(operator_time(graph, linear, Pass::Forward, {8, 1}), 5);
}

TEST(PipeDreamImport, StageIdsBecomeLayers) {
  const std::string text =
      "node1 -- Input0 -- forward_compute_time=1.000, backward_compute_time=0.000, activation_size=8.0, parameter_size=0.000 -- stage_id=0\n"
      "node2 -- Conv2d(3, 64) -- forward_compute_time=2.000, backward_compute_time=3.000, activation_size=8.0, parameter_size=8.000 -- stage_id=1\n"
      "\tnode1 -- node2\n";
  const CostGraph graph = parse_pipedream_graph(text, "graph.txt");
  ASSERT_EQ(graph.layers.size(), 2u);
  EXPECT_EQ(graph.layers[1].name, "stage.1");
  EXPECT_EQ(graph.nodes[1].layer, 1);
  EXPECT_EQ(partition_from_layer_counts(graph, std::vector<int>{1, 1}).stage_of_node, (std::vector<int>{0, 1}));
}

TEST(PipeDreamImport, ErrorsNameLineColumnAndShowACaret) {
  EXPECT_EQ(
      profile_error(
          "node1 -- Input0 -- forward_compute_time=1.0, backward_time=0.0, activation_size=1.0, parameter_size=0.0\n"),
      "graph.txt:1:46: expected 'backward_compute_time=NUMBER'\n"
      "node1 -- Input0 -- forward_compute_time=1.0, backward_time=0.0, activation_size=1.0, parameter_size=0.0\n"
      "                                             ^");
  EXPECT_EQ(
      profile_error(
          "\n\nnode1 -- X -- forward_compute_time=fast, backward_compute_time=0, activation_size=1, parameter_size=0"),
      "graph.txt:3:36: forward_compute_time: 'fast' is not a number\n"
      "node1 -- X -- forward_compute_time=fast, backward_compute_time=0, activation_size=1, parameter_size=0\n"
      "                                   ^");
  EXPECT_EQ(
      profile_error("node1 Input0\n"),
      "graph.txt:1:1: expected a node line 'nodeN -- DESC -- forward_compute_time=..., backward_compute_time=..., "
      "activation_size=..., parameter_size=...' or a tab-indented edge line 'nodeA -- nodeB'\n"
      "node1 Input0\n"
      "^");
  EXPECT_EQ(profile_error("node1 -- Input0 -- time=1\n"),
            "graph.txt:1:26: expected ' -- forward_compute_time=...' after the node's description\n"
            "node1 -- Input0 -- time=1\n"
            "                         ^");
  EXPECT_EQ(profile_error(kProfile + "\tnode3 -- node9\n"),
            "graph.txt:9:11: unknown node 'node9' (no node line defines it)\n"
            "\tnode3 -- node9\n"
            "          ^");
  EXPECT_EQ(profile_error(kProfile + "\tnode4 -- node1\n"),
            "graph.txt:9:2: this edge closes a cycle: 'node1' -> 'node2' -> 'node4' -> 'node1'\n"
            "\tnode4 -- node1\n"
            " ^");
  EXPECT_EQ(profile_error(kProfile + "\tnode1 -- node2\n"),
            "graph.txt:9:2: duplicate edge 'node1' -> 'node2' (first on line 5)\n"
            "\tnode1 -- node2\n"
            " ^");
  EXPECT_EQ(profile_error(kProfile.substr(0, kProfile.find('\n') + 1) + kProfile.substr(0, kProfile.find('\n') + 1)),
            "graph.txt:2:1: node 'node1' is already defined on line 1\n" + kProfile.substr(0, kProfile.find('\n')) +
                "\n^");
  EXPECT_EQ(profile_error("\n  \n"), "graph.txt: no node lines (nodeN -- DESC -- forward_compute_time=...)");
}

TEST(PipeDreamImport, ANonFiniteOrHugeTimeOrSizeIsRefusedWithItsField) {
  // from_chars reads nan and inf: they were taken as times and sizes, in silence.
  const auto line = [](const std::string& forward, const std::string& backward, const std::string& activation,
                       const std::string& parameters) {
    return "node1 -- X -- forward_compute_time=" + forward + ", backward_compute_time=" + backward +
           ", activation_size=" + activation + ", parameter_size=" + parameters;
  };
  const auto first_line = [](const std::string& error) { return error.substr(0, error.find('\n')); };
  EXPECT_EQ(first_line(profile_error(line("nan", "0", "1", "0"))),
            "graph.txt:1:36: forward_compute_time: 'nan' is not a finite number");
  EXPECT_EQ(first_line(profile_error(line("0", "inf", "1", "0"))),
            "graph.txt:1:61: backward_compute_time: 'inf' is not a finite number");
  EXPECT_EQ(first_line(profile_error(line("0", "0", "[1; NaN]", "0"))),
            "graph.txt:1:84: activation_size: 'NaN' is not a finite number");
  EXPECT_EQ(first_line(profile_error(line("0", "0", "1", "-infinity"))),
            "graph.txt:1:98: parameter_size: '-infinity' is not a finite number");
  EXPECT_EQ(first_line(profile_error(line("0", "0", "1e308", "0"))),
            "graph.txt:1:80: activation_size: '1e308' is too large (at most 1e30)");
  EXPECT_EQ(first_line(profile_error(line("0", "0", "1", "-2"))),
            "graph.txt:1:98: parameter_size: '-2' must not be negative");
}

TEST(MegatronLayout, ExpandsRepeatsGroupsAndEmptyStages) {
  EXPECT_EQ(parse_megatron_layout("E|(t|)*2,L"), (std::vector<std::string>{"E", "t", "t", "L"}));
  EXPECT_EQ(parse_megatron_layout("E||t|L"), (std::vector<std::string>{"E", "", "t", "L"}));
  EXPECT_EQ(parse_megatron_layout("Et*3|(tt|)*29,m|L").size(), 32u);  // DeepSeek-V3, PP16 x VPP2
  EXPECT_EQ(parse_megatron_layout("Et*3|(tt|)*29,m|L")[1], "tt");
  EXPECT_EQ(parse_megatron_layout(" E t*2 ((t)*2|)*2 L"), (std::vector<std::string>{"Etttt", "tt", "L"}));
}

TEST(MegatronLayout, PartitionsAZooGraphByLayers) {
  const CostGraph graph = build_model_graph(find_model("gpt3-1.3b"), find_hardware("A100-80GB"));
  const Partition partition = partition_from_megatron_layout(graph, "Et*6|(t*6|)*2,t*6L");
  EXPECT_EQ(partition.num_stages, 4);
  const Partition by_counts = partition_from_layer_counts(graph, std::vector<int>{7, 6, 6, 7});
  EXPECT_EQ(partition, by_counts);
  EXPECT_EQ(partition.stage_of_node[find_node(graph, "layer.5.qkv")], 0);
  EXPECT_EQ(partition.stage_of_node[find_node(graph, "layer.6.qkv")], 1);
  EXPECT_EQ(partition.stage_of_node[find_node(graph, "layer.18.qkv")], 3);
  EXPECT_EQ(partition.stage_of_node[find_node(graph, "head.loss")], 3);
  const Partition empty_stage = partition_from_megatron_layout(graph, "E||t*24|L");
  EXPECT_EQ(empty_stage.num_stages, 4);
}

std::string layout_error(const std::string& layout) {
  static const CostGraph graph = build_model_graph(find_model("gpt3-1.3b"), find_hardware("A100-80GB"));
  return error_of([&] { partition_from_megatron_layout(graph, layout); });
}

TEST(MegatronLayout, ErrorsPointAtTheCharacter) {
  EXPECT_EQ(layout_error("Et*3|(tt|*29,m|L"),
            "pipeline layout, character 6: '(' is never closed\n  Et*3|(tt|*29,m|L\n       ^");
  EXPECT_EQ(layout_error("Et*|L"), "pipeline layout, character 3: '*' needs a repeat count after it\n  Et*|L\n    ^");
  EXPECT_EQ(layout_error("Et*0|L"),
            "pipeline layout, character 4: the repeat count must be at least 1\n  Et*0|L\n     ^");
  EXPECT_EQ(
      layout_error("Ex|L"),
      "pipeline layout, character 2: unexpected 'x' (expected E, t, m, L, '|', '(', ')', '*' or ',')\n  Ex|L\n   ^");
  EXPECT_EQ(layout_error("Et)|L"), "pipeline layout, character 3: ')' without a matching '('\n  Et)|L\n    ^");
  EXPECT_EQ(layout_error("*3"), "pipeline layout, character 1: '*' must follow a symbol or a ')'\n  *3\n  ^");
  EXPECT_EQ(layout_error(" , "), "pipeline layout, character 1: the layout is empty\n   , \n  ^");
  EXPECT_EQ(layout_error("E()*3|L"), "pipeline layout, character 2: '()' repeats nothing\n  E()*3|L\n   ^");
  EXPECT_EQ(layout_error("t*24|E|L"),
            "pipeline layout, character 1: expected 'E' (the embedding, layer 'embedding' comes next in 'gpt3-1.3b'), "
            "got 't'\n  t*24|E|L\n  ^");
  EXPECT_EQ(layout_error("Et*23|L"),
            "pipeline layout, character 7: expected 't' (a transformer layer, layer 'layer.23' comes next in "
            "'gpt3-1.3b'), got 'L'\n  Et*23|L\n        ^");
  EXPECT_EQ(layout_error("Et*24|LL"),
            "pipeline layout, character 8: 'L' is one layer too many: 'gpt3-1.3b' has 26 layers and all are placed\n"
            "  Et*24|LL\n         ^");
  EXPECT_EQ(layout_error("Et*20"),
            "pipeline layout, character 6: the layout ends before placing every layer of 'gpt3-1.3b': 4 't', 1 'L' "
            "missing\n  Et*20\n       ^");
  EXPECT_EQ(layout_error("E(t*1000)*2000"),
            "pipeline layout, character 10: the repeat expands past 1000000 symbols\n  E(t*1000)*2000\n           ^");
  EXPECT_EQ(layout_error("E(t*1000)*1000"),
            "pipeline layout, character 2: the layout expands past 1000000 symbols\n  E(t*1000)*1000\n   ^");
  EXPECT_EQ(layout_error("Et*2*3"),
            "pipeline layout, character 5: '*' must follow a symbol or a ')'\n  Et*2*3\n      ^");
}

// Each '(' was a level of the parser's recursion: 40 thousand overflowed the stack.
TEST(MegatronLayout, ParenthesesNestedBeyondTheLimitAreOneError) {
  const std::string deep = "E" + std::string(40'000, '(') + "t" + std::string(40'000, ')') + "|L";
  const std::string error = layout_error(deep);
  EXPECT_EQ(error.substr(0, error.find('\n')),
            "pipeline layout, character 102: parentheses nest deeper than 100 levels");
  EXPECT_EQ(parse_megatron_layout("E" + std::string(100, '(') + "t" + std::string(100, ')') + "|L"),
            (std::vector<std::string>{"Et", "L"}));
}

}  // namespace
}  // namespace flexpipe
