// A captured operator's buffers and tensor constants: read with their bytes (units allowed) and
// whether they keep their size in another floating type, written back as read, and refused where
// malformed with the field named.
#include <string>

#include <gtest/gtest.h>

#include "error_text.h"
#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/interop/cost_graph_json.h"

namespace flexpipe {
namespace {

std::string graph_with(const std::string& buffers) {
  return R"({"format": "flexpipe-cost-graph", "version": 1, "hardware": {"flop_rate": 1000, "byte_rate": 100},
             "nodes": [{"name": "bn", "parameters": 128, "buffers": )" +
         buffers + R"(}, {"name": "b"}], "edges": [{"from": "bn", "to": "b", "bytes": 8}]})";
}

TEST(CostGraphBuffers, ReadWithTheirBytesAndWrittenBackAsRead) {
  const CostGraph g = parse_cost_graph(graph_with(R"([{"name": "bn.running_mean", "bytes": "1KiB"},
      {"name": "bn.num_batches_tracked", "bytes": 8, "unscaled": true}])"),
                                       "g.json");
  ASSERT_EQ(g.nodes[0].buffers.size(), 2u);
  EXPECT_EQ(g.nodes[0].buffers[0], (BufferUse{"bn.running_mean", 1024, false}));
  EXPECT_EQ(g.nodes[0].buffers[1], (BufferUse{"bn.num_batches_tracked", 8, true}));
  EXPECT_EQ(g.nodes[0].parameters, 128);  // buffers are never parameters
  EXPECT_TRUE(g.nodes[1].buffers.empty());
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(g), "again.json"), g);
}

TEST(CostGraphBuffers, AnotherFloatingTypeScalesAllButTheUnscaled) {
  const CostGraph g =
      parse_cost_graph(graph_with(
                           R"([{"name": "mask", "bytes": 1000}, {"name": "index", "bytes": 64, "unscaled": true}])"),
                       "g.json");
  const CostGraph doubled = with_activation_bytes_scaled(g, 2);
  EXPECT_EQ(doubled.nodes[0].buffers[0].bytes, 2000);
  EXPECT_EQ(doubled.nodes[0].buffers[1].bytes, 64);
}

TEST(CostGraphBuffers, MalformedBuffersNameTheField) {
  auto error = [](const std::string& buffers) {
    return test::error_text([&] { parse_cost_graph(graph_with(buffers), "g.json"); });
  };
  EXPECT_EQ(error(R"({"name": "x"})"), "g.json: nodes[0].buffers: expected an array, got an object");
  EXPECT_EQ(error(R"([{"bytes": 4}])"), "g.json: nodes[0].buffers[0]: a buffer needs a name");
  EXPECT_EQ(error(R"([{"name": "x"}])"), "g.json: nodes[0].buffers[0]: a buffer needs its bytes");
  EXPECT_EQ(error(R"([{"name": "x", "bytes": -4}])"),
            "g.json: nodes[0].buffers[0].bytes: must not be negative, got -4");
  EXPECT_EQ(error(R"([{"name": "x", "bytes": 4, "unscaled": 1}])"),
            "g.json: nodes[0].buffers[0].unscaled: expected true or false, got 1");
  EXPECT_EQ(error(R"([{"name": "x", "bytes": 4}, {"name": "x", "bytes": 4}])"),
            "g.json: nodes[0].buffers[1].name: buffer 'x' is listed twice for this operator");
  EXPECT_EQ(error(R"([{"name": "x", "bytes": 4, "trained": false}])").substr(0, 48),
            "g.json: nodes[0].buffers[0].trained: unknown key");
}

}  // namespace
}  // namespace flexpipe
