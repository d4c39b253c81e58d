// A cost graph's byte counts and its hardware's byte rate may be written with units; they read as the
// plain numbers they stand for (bytes, bytes per time unit), and FLOPs and times stay plain numbers.
#include <string>

#include <gtest/gtest.h>

#include "error_text.h"
#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/interop/cost_graph_json.h"

namespace flexpipe {
namespace {

std::string graph(const std::string& time_unit, const std::string& byte_rate, const std::string& node) {
  return R"({"format": "flexpipe-cost-graph", "version": 1, "time_unit": ")" + time_unit +
         R"(", "hardware": {"flop_rate": 1000, "byte_rate": )" + byte_rate + R"(}, "nodes": [)" + node +
         R"(, {"name": "b"}], "edges": [{"from": "a", "to": "b", "bytes": {"per_token": "2KiB"}}]})";
}

TEST(CostGraphUnits, ByteCountsAndTheByteRateTakeUnits) {
  const CostGraph written = parse_cost_graph(
      graph("ms", R"("3.35TB/s")",
            R"({"name": "a", "forward": {"time": 4, "flops": 8, "bytes": "1MiB"}, "saved_bytes": "1.5GiB",
                "output_bytes": {"per_token": "4kB", "fixed": 16}, "workspace_bytes": "64MiB"})"),
      "g.json");
  ASSERT_EQ(written.nodes.size(), 2u);
  const OperatorNode& a = written.nodes[0];
  EXPECT_EQ(a.forward.bytes, fixed_amount(1048576));
  EXPECT_EQ(a.forward.flops, fixed_amount(8));
  EXPECT_EQ(a.saved_bytes, fixed_amount(1610612736));
  EXPECT_EQ(a.output_bytes.per_token, 4000);
  EXPECT_EQ(a.output_bytes.fixed, 16);
  EXPECT_EQ(a.workspace_bytes, fixed_amount(67108864));
  EXPECT_EQ(written.edges.at(0).bytes.per_token, 2048);
  // 3.35e12 bytes per second is 3.35e9 bytes per millisecond.
  ASSERT_TRUE(written.hardware);
  EXPECT_DOUBLE_EQ(written.hardware->byte_rate, 3.35e9);
}

TEST(CostGraphUnits, WhatCannotBeReadNamesTheField) {
  auto error = [](const std::string& time_unit, const std::string& byte_rate, const std::string& node) {
    return test::error_text([&] { parse_cost_graph(graph(time_unit, byte_rate, node), "g.json"); });
  };
  EXPECT_EQ(error("ms", "100", R"({"name": "a", "saved_bytes": "1.5 GiBs"})"),
            "g.json: nodes[0].saved_bytes: '1.5 GiBs' is not a size; write 80GiB, 1.5GB or a bare number in 'bytes'");
  EXPECT_EQ(error("ms", "100", R"({"name": "a", "forward": {"flops": "8GB"}})"),
            "g.json: nodes[0].forward.flops: expected a number or an object of shape terms, got \"8GB\"");
  EXPECT_EQ(error("unit", R"("3.35TB/s")", R"({"name": "a"})"),
            "g.json: hardware.byte_rate: 3.35TB/s cannot be converted: the costs count memory in 'bytes' per 'unit'; "
            "give a bare number in it");
  EXPECT_EQ(error("ms", R"("0GB/s")", R"({"name": "a"})"), "g.json: hardware.byte_rate: must be positive, got 0");
}

}  // namespace
}  // namespace flexpipe
