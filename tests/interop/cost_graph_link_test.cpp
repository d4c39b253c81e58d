// A measured cost graph carries the link its transport was measured as (`flexpipe profile
// --transport`): read with or without units, written back as it was, refused with the field named.
#include <string>

#include <gtest/gtest.h>

#include "error_text.h"
#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/interop/cost_graph_json.h"

namespace flexpipe {
namespace {

std::string graph_with(const std::string& link) {
  return R"({"format": "flexpipe-cost-graph", "version": 1, "time_unit": "ms", "link": )" + link +
         R"(, "nodes": [{"name": "a", "scaling": {"rule": "power"}}]})";
}

TEST(CostGraphLink, ReadInTheGraphsTimeUnitAndBytes) {
  const CostGraph g =
      parse_cost_graph(graph_with(R"({"latency": "50us", "bandwidth": "8GB/s", "send_cpu": 0.02, "receive_cpu": "10us",
                     "cpu_bandwidth": 1.5e6, "rendezvous": "300us"})"),
                       "g.json");
  ASSERT_TRUE(g.link);
  EXPECT_DOUBLE_EQ(g.link->latency, 0.05);
  EXPECT_DOUBLE_EQ(g.link->bandwidth, 8e6);  // 8e9 bytes per second is 8e6 per millisecond
  EXPECT_DOUBLE_EQ(g.link->send_cpu, 0.02);
  EXPECT_DOUBLE_EQ(g.link->receive_cpu, 0.01);
  EXPECT_DOUBLE_EQ(g.link->cpu_bandwidth, 1.5e6);
  EXPECT_DOUBLE_EQ(g.link->rendezvous, 0.3);
  // Left out: a link that only delays by its latency; no "link" at all: none.
  const CostGraph latency_only = parse_cost_graph(graph_with(R"({"latency": 0.1})"), "g.json");
  EXPECT_EQ(*latency_only.link, (Link{0.1, kInfinity, 0, 0, kInfinity}));
  EXPECT_FALSE(
      parse_cost_graph(
          R"({"format": "flexpipe-cost-graph", "version": 1, "nodes": [{"name": "a", "scaling": {"rule": "power"}}]})",
          "g.json")
          .link);
}

TEST(CostGraphLink, WrittenBackAsRead) {
  CostGraph g =
      parse_cost_graph(graph_with(R"({"latency": 0.034, "bandwidth": 8.04e6, "send_cpu": 0.021, "rendezvous": 0.12})"),
                       "g.json");
  const std::string text = cost_graph_to_json(g);
  EXPECT_NE(text.find(R"("link": {
  "latency": 0.034,
  "bandwidth": 8040000,
  "send_cpu": 0.021,
  "rendezvous": 0.12
 })"),
            std::string::npos)
      << text;
  EXPECT_EQ(parse_cost_graph(text, "again.json"), g);
  g.link->bandwidth = kInfinity;  // unlimited is null
  EXPECT_EQ(parse_cost_graph(cost_graph_to_json(g), "again.json"), g);
}

TEST(CostGraphLink, WhatCannotBeReadNamesTheField) {
  auto error = [](const std::string& link) {
    return test::error_text([&] { parse_cost_graph(graph_with(link), "g.json"); });
  };
  EXPECT_EQ(error("5"), "g.json: link: expected an object, got 5");
  EXPECT_EQ(
      error(R"({"latency": 1, "jitter": 2})"),
      "g.json: link.jitter: unknown key (known keys: latency, bandwidth, send_cpu, receive_cpu, cpu_bandwidth, rendezvous)");
  EXPECT_EQ(error(R"({"bandwidth": 0})"), "g.json: link.bandwidth: must be positive (null for unlimited), got 0");
  EXPECT_EQ(error(R"({"send_cpu": -1})"), "g.json: link.send_cpu: must not be negative, got -1");
  EXPECT_EQ(error(R"({"rendezvous": -1})"), "g.json: link.rendezvous: must not be negative, got -1");
  EXPECT_EQ(error(R"({"latency": "5 parsecs"})"),
            "g.json: link.latency: '5 parsecs' is not a time; write 5us, 2ms or a bare number in 'ms'");
}

}  // namespace
}  // namespace flexpipe
