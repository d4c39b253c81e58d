// The cost graph format: reading, writing, scaling rules and every error message.
#include <gtest/gtest.h>

#include <string>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

// Three operators, a residual edge a -> c, one power-scaled node.
const char* kSmallGraph = R"({
  "format": "flexpipe-cost-graph", "version": 1, "name": "small", "time_unit": "ms",
  "reference": {"microbatch_size": 2, "seq_len": 128},
  "hardware": {"name": "toy", "flop_rate": 1000, "byte_rate": 100},
  "layers": [{"name": "first", "role": "embedding"}, {"name": "second", "role": "transformer"}],
  "nodes": [
    {"name": "a", "kind": "linear", "layer": "first", "parameters": 10,
     "forward": {"time": 4, "flops": {"per_token": 8}, "bytes": 2},
     "saved_bytes": {"per_token": 2}, "output_bytes": {"per_token": 4}},
    {"name": "b", "layer": "second", "scaling": {"rule": "power", "batch_exponent": 1, "sequence_exponent": 2},
     "forward": {"time": 3}, "backward_input": {"time": 6},
     "saved_bytes": {"per_token_seq": 1, "per_sample": 4}, "freed_by_input": {"per_token_seq": 1},
     "output_bytes": {"per_token": 4}, "workspace_bytes": 64},
    {"name": "c", "layer": "second", "parameters": 6, "active_parameters": 3, "tied_to": "a",
     "backward_weight": {"time": 1, "flops": 5, "bytes": 0}}
  ],
  "edges": [{"from": "a", "to": "b", "bytes": {"per_token": 4}}, {"from": "b", "to": "c", "bytes": {"per_token": 4}},
            {"from": "a", "to": "c", "bytes": {"per_token": 4}}]
})";

std::string error_of(const std::string& text) {
  try {
    parse_cost_graph(text, "g.json");
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

// kSmallGraph with one substring replaced.
std::string with(const std::string& from, const std::string& to) {
  std::string text = kSmallGraph;
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(ShapePolynomial, EvaluatesEachTerm) {
  const ShapePolynomial p{1, 2, 3, 4};
  EXPECT_EQ(p.at(2, 10), 1 + 2 * 2 + 3 * 2 * 10 + 4 * 2 * 100);
  EXPECT_EQ(2 * p + p, (ShapePolynomial{3, 6, 9, 12}));
  EXPECT_TRUE(ShapePolynomial{}.is_zero());
}

TEST(ActivationBytesScaled, ScalesEveryByteCountAndNothingElse) {
  const CostGraph graph = parse_cost_graph(kSmallGraph, "g.json");
  const CostGraph doubled = with_activation_bytes_scaled(graph, 2);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const OperatorNode &was = graph.nodes[i], &now = doubled.nodes[i];
    EXPECT_EQ(now.saved_bytes, 2 * was.saved_bytes);
    EXPECT_EQ(now.freed_by_input, 2 * was.freed_by_input);
    EXPECT_EQ(now.shared_saved_bytes, 2 * was.shared_saved_bytes);
    EXPECT_EQ(now.output_bytes, 2 * was.output_bytes);
    EXPECT_EQ(now.workspace_bytes, 2 * was.workspace_bytes);
    EXPECT_EQ(now.forward, was.forward);
    EXPECT_EQ(now.parameters, was.parameters);
  }
  EXPECT_EQ(doubled.nodes[1].saved_bytes.at(2, 128), 2 * (128 * 128 * 2 + 4 * 2));
  EXPECT_EQ(doubled.edges[0].bytes, 2 * graph.edges[0].bytes);
}

// A max pool saves its input (float, 96 bytes per sample) and its indices (int64, 32): trained in
// float64 after a float32 capture it holds 2 x 96 + 32. Without parameters it frees all at I.
TEST(ActivationBytesScaled, SavedTensorsOfAnotherTypeKeepTheirSize) {
  CostGraph graph = parse_cost_graph(kSmallGraph, "g.json");
  OperatorNode& pool = graph.nodes[1];
  pool.saved_bytes = pool.freed_by_input = ShapePolynomial{0, 128, 0, 0};
  pool.unscaled_saved_bytes = ShapePolynomial{0, 32, 0, 0};
  graph.nodes[0].freed_by_input = ShapePolynomial{0, 0, 1, 0};  // a: part of its 2 per token
  validate_cost_graph(graph, "g.json");
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(graph), "again"), graph);
  const CostGraph doubled = with_activation_bytes_scaled(graph, 2);
  EXPECT_EQ(doubled.nodes[1].saved_bytes, (ShapePolynomial{0, 2 * 96 + 32, 0, 0}));
  EXPECT_EQ(doubled.nodes[1].freed_by_input, doubled.nodes[1].saved_bytes);
  EXPECT_EQ(doubled.nodes[1].unscaled_saved_bytes, graph.nodes[1].unscaled_saved_bytes);
  EXPECT_EQ(doubled.nodes[0].freed_by_input, (ShapePolynomial{0, 0, 2, 0}));
  pool.unscaled_saved_bytes = ShapePolynomial{0, 129, 0, 0};
  EXPECT_EQ(error_of(cost_graph_to_json(graph)),
            "g.json: nodes[1] ('b'): unscaled_saved_bytes 258 exceed saved_bytes 256 at the reference shape");
}

TEST(ActivationBytesScaled, ACaptureMeasuresInItsFirstFloatingInputsType) {
  CaptureRecord capture;
  EXPECT_EQ(captured_element_bytes(capture), 4);  // no inputs recorded: float32 parameters
  capture.inputs = {{{2, 16}, "int64"}, {{2, 16, 8}, "float64"}};
  EXPECT_EQ(captured_element_bytes(capture), 8);
  capture.inputs = {{{2, 16}, "int64"}};
  EXPECT_EQ(captured_element_bytes(capture), 4);  // token ids into a float32 model
  capture.inputs = {{{2, 3}, "bfloat16"}};
  EXPECT_EQ(captured_element_bytes(capture), 2);
}

TEST(CostGraphFormat, ReadsEveryField) {
  const CostGraph graph = parse_cost_graph(kSmallGraph, "g.json");
  EXPECT_EQ(graph.name, "small");
  EXPECT_EQ(graph.reference, (Shape{2, 128}));
  ASSERT_TRUE(graph.hardware);
  EXPECT_EQ(graph.hardware->byte_rate, 100);
  ASSERT_EQ(graph.nodes.size(), 3u);
  EXPECT_EQ(graph.layers[1].role, LayerRole::Transformer);
  const OperatorNode& a = graph.nodes[0];
  EXPECT_EQ(a.kind, "linear");
  EXPECT_EQ(a.layer, 0);
  EXPECT_EQ(a.forward.flops, per_token(8));
  EXPECT_EQ(a.forward.bytes, fixed_amount(2));
  EXPECT_EQ(a.active_parameters, 10);  // defaults to parameters
  EXPECT_EQ(a.scaling.rule, ScalingRule::Roofline);
  const OperatorNode& b = graph.nodes[1];
  EXPECT_EQ(b.scaling, (Scaling{ScalingRule::Power, 1, 2}));
  EXPECT_EQ(b.saved_bytes, (ShapePolynomial{0, 4, 0, 1}));
  EXPECT_EQ(b.workspace_bytes, fixed_amount(64));
  const OperatorNode& c = graph.nodes[2];
  EXPECT_EQ(c.tied_to, 0);
  EXPECT_EQ(c.active_parameters, 3);
  EXPECT_EQ(graph.edges.size(), 3u);
  EXPECT_EQ(graph.edges[2].from, 0);
  EXPECT_EQ(graph.edges[2].to, 2);
  EXPECT_EQ(total_parameters(graph), 10);  // the tied copy counts once
}

TEST(CostGraphFormat, RoundTripsHandWrittenAndZooGraphs) {
  const CostGraph small = parse_cost_graph(kSmallGraph, "g.json");
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(small), "again"), small);
  for (const char* name : {"llama2-7b", "t5-large", "mixtral-8x7b"}) {
    const CostGraph graph = build_model_graph(find_model(name), find_hardware("A100-80GB"), {.flash_attention = true});
    EXPECT_EQ(parse_cost_graph(cost_graph_to_json(graph), name), graph) << name;
  }
  // Without fused attention Llama's P V product shares the softmax's probabilities.
  const CostGraph llama = build_model_graph(find_model("llama2-7b"), find_hardware("A100-80GB"), {});
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(llama), "llama"), llama);
}

// The reader takes each node and edge as the parser completes it (large graphs), looking names up
// once the whole document is read: lists in any order of keys read the same.
TEST(CostGraphFormat, ReadsTheListsInAnyOrder) {
  const std::string text = kSmallGraph;
  const size_t layers = text.find("\"layers\""), nodes = text.find("\"nodes\""), edges = text.find("\"edges\"");
  const std::string head = text.substr(0, layers), layer_list = text.substr(layers, nodes - layers),
                    node_list = text.substr(nodes, edges - nodes), edge_list = text.substr(edges);
  // Edges first, then nodes, then the layers the nodes name.
  const std::string reordered = head + edge_list.substr(0, edge_list.rfind('}')) + ",\n" + node_list +
                                layer_list.substr(0, layer_list.rfind(',')) + "}";
  EXPECT_EQ(parse_cost_graph(reordered, "g.json"), parse_cost_graph(kSmallGraph, "g.json"));
}

// Whatever the fast reading meets, errors and answers are those of reading the whole document in order.
TEST(CostGraphErrors, TheFirstErrorInDocumentOrderIsReported) {
  // A bad node and, after the nodes in the file, a bad layer: the layers are read first.
  std::string text = with("\"time\": 4", "\"time\": -4");
  const std::string layers =
      "\"layers\": [{\"name\": \"first\", \"role\": \"embedding\"}, {\"name\": \"second\", \"role\": "
      "\"transformer\"}],";
  text.erase(text.find(layers), layers.size());
  text.insert(text.rfind('}'), ", \"layers\": [{\"name\": \"first\", \"role\": \"head\"}, {\"name\": \"second\"}]");
  EXPECT_EQ(error_of(text),
            "g.json: layers[0].role: expected one of embedding, transformer, mtp, loss, other; got \"head\"");
  // A list given twice is refused at the second, as any repeated key is (the last one held, in silence).
  std::string twice = kSmallGraph;
  twice.insert(twice.find("\"nodes\""), "\"nodes\": [{\"name\": 3}], ");
  EXPECT_EQ(error_of(twice),
            "g.json:6:27: invalid JSON: duplicate key nodes (JSON keeps only the last; give each key once)");
  // Not a list of objects.
  EXPECT_EQ(error_of(with("\"edges\": [", "\"edges\": [3, ")), "g.json: edges[0]: expected an object, got 3");
}

TEST(CostGraphFormat, SharedSavedBytesNameTheTensorsTheOperatorBeforeSaves) {
  const std::string shared = R"("backward_weight": {"time": 1, "flops": 5, "bytes": 0},
     "saved_bytes": {"per_token": 2}, "shared_saved_bytes": {"per_token": 1})";
  const CostGraph graph =
      parse_cost_graph(with(R"("backward_weight": {"time": 1, "flops": 5, "bytes": 0})", shared), "g.json");
  EXPECT_EQ(graph.nodes[2].shared_saved_bytes, per_token(1));
  EXPECT_TRUE(graph.nodes[1].shared_saved_bytes.is_zero());
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(graph), "again"), graph);
}

TEST(CostGraphErrors, SharedSavedBytesNeedAFeedingNeighbourThatSavesThem) {
  const std::string c_saves = R"("backward_weight": {"time": 1, "flops": 5, "bytes": 0})";
  // c saves 256 bytes at the reference shape (2 x 128 tokens) and b 32,776.
  EXPECT_EQ(error_of(with(c_saves,
                          c_saves + R"(, "saved_bytes": {"per_token": 1}, "shared_saved_bytes": {"per_token": 2})")),
            "g.json: nodes[2] ('c'): shared_saved_bytes 512 exceed what it saves (256) or what 'b' before it saves "
            "(32776) at the reference shape");
  EXPECT_EQ(error_of(
                with("\"kind\": \"linear\",", "\"kind\": \"linear\", \"shared_saved_bytes\": {\"per_token\": 1},")),
            "g.json: nodes[0] ('a'): shared_saved_bytes 256 but no node comes before it");
  EXPECT_EQ(error_of(with("\"freed_by_input\": {\"per_token_seq\": 1},",
                          "\"freed_by_input\": {\"per_token_seq\": 1}, \"shared_saved_bytes\": 8,")),
            "g.json: nodes[1] ('b'): shares saved tensors with 'a' before it, which is in another layer");
  std::string unfed = with(c_saves, c_saves + R"(, "saved_bytes": {"per_token": 1}, "shared_saved_bytes": 8)");
  const std::string b_to_c = R"({"from": "b", "to": "c", "bytes": {"per_token": 4}},)";
  unfed.erase(unfed.find(b_to_c), b_to_c.size());
  EXPECT_EQ(error_of(unfed), "g.json: nodes[2] ('c'): shares saved tensors with 'b' before it, which does not feed it");
}

// a -> b: b saves 1 byte per token of the 4 it reads from a (b saves 32,776 bytes in all at the
// reference shape, 2 x 128 tokens).
TEST(CostGraphFormat, AnEdgeMaySayWhatItsReaderSavesOfIt) {
  const std::string a_to_b = R"({"from": "a", "to": "b", "bytes": {"per_token": 4})";
  const CostGraph graph = parse_cost_graph(with(a_to_b, a_to_b + R"(, "saved_bytes": {"per_token": 1})"), "g.json");
  ASSERT_TRUE(graph.edges[0].saved_bytes.has_value());
  EXPECT_EQ(*graph.edges[0].saved_bytes, per_token(1));
  EXPECT_FALSE(graph.edges[1].saved_bytes.has_value());  // unknown: b -> c says nothing
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(graph), "again"), graph);
  EXPECT_EQ(*with_activation_bytes_scaled(graph, 2).edges[0].saved_bytes, per_token(2));
  // Zero is known: the reader saves none of it (a ReLU saves its output).
  EXPECT_EQ(*parse_cost_graph(with(a_to_b, a_to_b + R"(, "saved_bytes": 0)"), "g.json").edges[0].saved_bytes,
            ShapePolynomial{});
}

TEST(CostGraphErrors, AnEdgesSavedBytesFitTheTensorAndWhatItsReaderSaves) {
  const std::string a_to_b = R"({"from": "a", "to": "b", "bytes": {"per_token": 4})";
  EXPECT_EQ(error_of(with(a_to_b, a_to_b + R"(, "saved_bytes": {"per_token": 5})")),
            "g.json: edges[0] ('a' -> 'b'): saved_bytes 1280 exceed the tensor's bytes 1024 at the reference shape");
  // b -> c and a -> c each within their tensors, together more than c saves (0).
  const std::string b_to_c = R"({"from": "b", "to": "c", "bytes": {"per_token": 4})";
  EXPECT_EQ(
      error_of(with(b_to_c, b_to_c + R"(, "saved_bytes": 8)")),
      "g.json: nodes[2] ('c'): its edges' saved_bytes add up to 8, more than it saves (0) at the reference shape");
  EXPECT_EQ(error_of(with(a_to_b, a_to_b + R"(, "saved_bytes": {"per_tok": 1})")),
            "g.json: edges[0].saved_bytes.per_tok: unknown key (known keys: fixed, per_sample, per_token, "
            "per_token_seq)");
}

TEST(CostGraphScaling, PowerRuleScalesByExponents) {
  const CostGraph graph = parse_cost_graph(kSmallGraph, "g.json");
  const OperatorNode& b = graph.nodes[1];
  EXPECT_EQ(operator_time(graph, b, Pass::Forward, {2, 128}), 3);
  EXPECT_EQ(operator_time(graph, b, Pass::Forward, {4, 256}), 3 * 2 * 4);
  EXPECT_EQ(operator_time(graph, b, Pass::BackwardInput, {1, 64}), 6 * 0.5 * 0.25);
}

TEST(CostGraphScaling, RooflineRuleIsExactForFlopAndByteCosts) {
  const CostGraph graph = parse_cost_graph(kSmallGraph, "g.json");
  const OperatorNode& a = graph.nodes[0];
  // Reference: max(8*256/1000, 2/100) = 2.048, stored as 4: times scale by the roofline's ratio.
  EXPECT_DOUBLE_EQ(operator_time(graph, a, Pass::Forward, {4, 128}), 4 * (8.0 * 512 / 1000) / (8.0 * 256 / 1000));
  // A time with no FLOPs or bytes behind it stays fixed.
  CostGraph fixed = graph;
  fixed.nodes[0].forward.flops = {};
  fixed.nodes[0].forward.bytes = {};
  EXPECT_EQ(operator_time(fixed, fixed.nodes[0], Pass::Forward, {8, 8}), 4);
  // Zoo graphs: the time at another shape equals the roofline of that shape.
  const CostGraph gpt = build_model_graph(find_model("gpt3-1.3b"), find_hardware("H100-80GB"));
  for (const OperatorNode& node : gpt.nodes)
    EXPECT_DOUBLE_EQ(operator_time(gpt, node, Pass::Forward, {4, 512}),
                     roofline_time(node.forward, *gpt.hardware, {4, 512}))
        << node.name;
}

TEST(CostGraphErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(
      error_of("{\n  \"format\": \"flexpipe-cost-graph\",\n  \"version\": 1,,\n}"),
      "g.json:3:16: invalid JSON: syntax error while parsing object key - unexpected ','; expected string literal");
}

TEST(CostGraphErrors, HeaderErrors) {
  EXPECT_EQ(error_of("[1]"), "g.json: expected a JSON object at the top level, got an array");
  EXPECT_EQ(error_of(R"({"version": 1})"),
            "g.json: format: missing (a cost graph starts with \"format\": \"flexpipe-cost-graph\")");
  EXPECT_EQ(error_of(with("\"version\": 1", "\"version\": 2")),
            "g.json: version: unsupported version 2 (this build reads version 1)");
  EXPECT_EQ(
      error_of(with("\"name\": \"small\"", "\"nmae\": \"small\"")),
      "g.json: nmae: unknown key (known keys: format, version, name, time_unit, reference, hardware, link, layers, "
      "nodes, edges, capture)");
  EXPECT_EQ(error_of(with("\"seq_len\": 128", "\"seq_len\": 0")), "g.json: reference.seq_len: must be positive, got 0");
}

TEST(CostGraphErrors, NodeFieldErrorsNameTheJsonPath) {
  EXPECT_EQ(error_of(with("\"time\": 4", "\"time\": -4")),
            "g.json: nodes[0].forward.time: must not be negative, got -4");
  EXPECT_EQ(
      error_of(with("{\"per_token\": 8}", "{\"per_tokn\": 8}")),
      "g.json: nodes[0].forward.flops.per_tokn: unknown key (known keys: fixed, per_sample, per_token, per_token_seq)");
  EXPECT_EQ(error_of(with("\"bytes\": 2", "\"bytes\": \"2\"")),
            "g.json: nodes[0].forward.bytes: '2' is not a size with a unit; write 80GiB, 1.5GB or a bare number in "
            "'bytes'");
  EXPECT_EQ(error_of(with("\"bytes\": 2", "\"bytes\": true")),
            "g.json: nodes[0].forward.bytes: expected a number or an object of shape terms, got true");
  EXPECT_EQ(error_of(with("\"rule\": \"power\"", "\"rule\": \"cubic\"")),
            "g.json: nodes[1].scaling.rule: expected \"roofline\" or \"power\", got \"cubic\"");
  EXPECT_EQ(error_of(with("\"layer\": \"first\"", "\"layer\": \"zeroth\"")),
            "g.json: nodes[0].layer: unknown layer 'zeroth' (define it in \"layers\")");
  EXPECT_EQ(error_of(with("\"tied_to\": \"a\"", "\"tied_to\": \"z\"")), "g.json: nodes[2].tied_to: unknown node 'z'");
  EXPECT_EQ(error_of(with("{\"name\": \"b\"", "{\"name\": \"a\"")),
            "g.json: nodes[1].name: 'a' is already the name of nodes[0]");
  EXPECT_EQ(error_of(with("\"freed_by_input\": {\"per_token_seq\": 1}", "\"freed_by_input\": {\"per_token_seq\": 2}")),
            "g.json: nodes[1] ('b'): freed_by_input 65536 exceeds saved_bytes 32776 at the reference shape");
  EXPECT_EQ(error_of(with("\"active_parameters\": 3", "\"active_parameters\": 7")),
            "g.json: nodes[2] ('c'): active_parameters 7 exceed parameters 6");
  EXPECT_EQ(error_of(with("\"role\": \"embedding\"", "\"role\": \"head\"")),
            "g.json: layers[0].role: expected one of embedding, transformer, mtp, loss, other; got \"head\"");
}

TEST(CostGraphErrors, RooflineNeedsHardwareRates) {
  std::string text = kSmallGraph;
  text.erase(text.find("\"hardware\""),
             std::string("\"hardware\": {\"name\": \"toy\", \"flop_rate\": 1000, \"byte_rate\": 100},").size());
  EXPECT_EQ(error_of(text), "g.json: nodes[0] ('a'): scales by roofline but the graph names no hardware rates");
}

TEST(CostGraphErrors, DanglingEdgesCyclesAndOrder) {
  EXPECT_EQ(error_of(with("{\"from\": \"b\", \"to\": \"c\"", "{\"from\": \"b\", \"to\": \"d\"")),
            "g.json: edges[1].to: unknown node 'd' (dangling edge)");
  EXPECT_EQ(error_of(with("{\"from\": \"b\", \"to\": \"c\"", "{\"to\": \"c\"")),
            "g.json: edges[1].from: missing (an edge names its \"from\" and \"to\" nodes)");
  EXPECT_EQ(error_of(with("{\"from\": \"b\", \"to\": \"c\"", "{\"from\": \"b\", \"to\": \"b\"")),
            "g.json: edges[1] ('b' -> 'b'): an operator cannot feed itself (cycle)");
  EXPECT_EQ(error_of(with("{\"from\": \"a\", \"to\": \"c\"", "{\"from\": \"a\", \"to\": \"b\"")),
            "g.json: edges[2] ('a' -> 'b'): duplicate edge");
  EXPECT_EQ(error_of(with("{\"from\": \"a\", \"to\": \"c\"", "{\"from\": \"c\", \"to\": \"a\"")),
            "g.json: the graph has a cycle: 'b' -> 'c' -> 'a' -> 'b'");
  std::string backwards = kSmallGraph;
  backwards.replace(backwards.find("\"edges\""), std::string::npos, "\"edges\": [{\"from\": \"b\", \"to\": \"a\"}]}");
  EXPECT_EQ(error_of(backwards),
            "g.json: edges[0] ('b' -> 'a'): 'a' is listed before 'b'; list the nodes in a topological order");
}

TEST(CostGraphErrors, ZooGraphsAreValid) {
  for (const ModelConfig& config : model_zoo())
    EXPECT_NO_THROW(validate_cost_graph(build_model_graph(config, find_hardware("H200-141GB")), config.name));
}

// What `flexpipe capture` writes (python/tests/models.py's U-Net): the capture record and the notes
// are read, and the file reads back equal after writing.
TEST(CapturedGraphs, ReadTheCaptureRecordAndRoundTrip) {
  const CostGraph graph = load_cost_graph(FLEXPIPE_TEST_DATA "/captured/tiny_unet.graph.json");
  ASSERT_TRUE(graph.capture);
  EXPECT_EQ(graph.capture->factory, "tiny_unet");
  ASSERT_EQ(graph.capture->inputs.size(), 1u);
  EXPECT_EQ(graph.capture->inputs[0], (CapturedInput{{2, 3, 8, 8}, "float32"}));
  EXPECT_EQ(graph.capture->loss, "mse");
  EXPECT_EQ(graph.capture->repeats, 3);
  EXPECT_EQ(graph.reference, (Shape{2, 1}));
  // The skip from the first level to the decoder's concatenation crosses the bottom of the U.
  const int skip_from = find_node(graph, "relu");
  const int cat = find_node(graph, "cat");
  ASSERT_GE(skip_from, 0);
  EXPECT_GE(cat - skip_from, 6);
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(graph), "again"), graph);
}

TEST(CapturedGraphs, NotesAndKeptModulesRoundTrip) {
  CostGraph graph = parse_cost_graph(kSmallGraph, "g.json");
  graph.nodes[1].note = "FLOPs unknown (cumsum): measured time only";
  graph.capture = CaptureRecord{.file = "m.py",
                                .factory = "make",
                                .inputs = {{{8, 128}, "int64"}},
                                .loss = "cross_entropy",
                                .threads = 2,
                                .warmup = 2,
                                .repeats = 5,
                                .clock = "cpu",
                                .torch_version = "1.13.0",
                                .kept_whole = {{"blocks.1", "control flow at m.py:9"}}};
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(graph), "again"), graph);
}

// A graph captured through torch.export: its tracer, its floating type, inputs by forward's argument names,
// and an edge that keeps its size when the model trains in another type (a mask) all read back.
TEST(CapturedGraphs, TracerTypeNamedInputsAndUnscaledEdgesRoundTrip) {
  CostGraph graph = parse_cost_graph(kSmallGraph, "g.json");
  graph.capture = CaptureRecord{.file = "gpt2.py",
                                .factory = "tiny",
                                .inputs = {{{2, 128}, "int64", "input_ids"}, {{2, 128}, "int64", "attention_mask"}},
                                .loss = "cross_entropy",
                                .tracer = "export",
                                .dtype = "float64"};
  graph.edges[0].unscaled = true;
  const std::string text = cost_graph_to_json(graph);
  EXPECT_NE(text.find(R"("name": "attention_mask")"), std::string::npos);
  EXPECT_NE(text.find(R"("unscaled": true)"), std::string::npos);
  EXPECT_EQ(parse_cost_graph(text, "again"), graph);
  EXPECT_EQ(captured_element_bytes(*graph.capture), 8);  // the record's type, not the inputs' (integers)
  // Scaled to float32 (half the bytes), the mask's edge keeps its size and the other edges halve.
  const CostGraph halved = with_activation_bytes_scaled(graph, 0.5);
  EXPECT_EQ(halved.edges[0].bytes, graph.edges[0].bytes);
  for (size_t e = 1; e < graph.edges.size(); ++e) EXPECT_EQ(halved.edges[e].bytes, 0.5 * graph.edges[e].bytes);
  EXPECT_EQ(error_of(with(R"("to": "b", "bytes": {"per_token": 4}})", R"("to": "b", "bytes": 4, "unscaled": 1})")),
            "g.json: edges[0].unscaled: expected true or false, got 1");
}

TEST(CapturedGraphs, CaptureRecordErrorsNameTheJsonPath) {
  const auto captured = [](const std::string& record) {
    std::string text = kSmallGraph;
    return error_of(text.insert(text.rfind('}'), ", \"capture\": " + record));
  };
  EXPECT_EQ(captured(R"({"inputs": [{"shape": [8, 0]}]})"),
            "g.json: capture.inputs[0].shape[1]: must be positive, got 0");
  EXPECT_EQ(captured(R"({"inputs": [{"shape": [8.5]}]})"),
            "g.json: capture.inputs[0].shape[0]: must be a whole number of at most 2147483647, got 8.5");
  EXPECT_EQ(captured(R"({"inputs": [{"dtype": "int64"}]})"), "g.json: capture.inputs[0].shape: missing");
  EXPECT_EQ(captured(R"({"threads": -1})"), "g.json: capture.threads: must not be negative, got -1");
  EXPECT_EQ(captured(R"({"file": 3})"), "g.json: capture.file: expected a string, got 3");
  EXPECT_EQ(captured(R"({"model": "x"})"),
            "g.json: capture.model: unknown key (known keys: file, factory, inputs, loss, threads, warmup, repeats, "
            "clock, torch, tracer, dtype, kept_whole)");
  EXPECT_EQ(captured(R"({"tracer": "dynamo"})"), "g.json: capture.tracer: 'dynamo' is not a tracer: fx or export");
  EXPECT_EQ(captured(R"({"dtype": "int64"})"),
            "g.json: capture.dtype: 'int64' is not a floating type: float32, float64, float16 or bfloat16");
  EXPECT_EQ(captured(R"({"inputs": [{"shape": [2], "name": "ids"}, {"shape": [2], "name": "ids"}]})"),
            "g.json: capture.inputs[1].name: 'ids' is already the name of capture.inputs[0]");
}

}  // namespace
}  // namespace flexpipe
