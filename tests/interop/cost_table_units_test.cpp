// A cost table written with units reads as the same table in plain numbers of its declared units, and
// a unit it cannot take is one error naming the file and the field.
#include <string>

#include <gtest/gtest.h>

#include "error_text.h"
#include "flexpipe/costs/cost_table.h"
#include "flexpipe/interop/cost_table_json.h"

namespace flexpipe {
namespace {

std::string table(const std::string& units, const std::string& body) {
  return "{\"format\": \"flexpipe-costs\", \"version\": 1, " + units + ", " + body + "}";
}

const std::string kBytesAndMs = R"("time_unit": "ms", "memory_unit": "bytes")";

TEST(CostTableUnits, EveryTimeSizeAndBandwidthFieldTakesAUnit) {
  const CostTable written = parse_cost_table(table(kBytesAndMs, R"(
    "stages": [{"forward": "1.2ms", "backward_input": "1300us", "backward_weight": "0.001s", "backward": "2ms",
                "recompute": "1ms", "optimizer": "500us", "activation_bytes": "1.5GiB", "freed_by_input": "0.5GiB",
                "checkpoint_bytes": "16MiB", "parameter_bytes": "2GB", "gradient_bytes": "2GB",
                "optimizer_bytes": "8GB", "output_bytes": "50MB", "offload_bytes": "1GiB",
                "rebuilt_peak_bytes": "1GiB", "workspace_bytes": "256MiB"}],
    "link": {"latency": "5us", "bandwidth": "900GB/s"},
    "devices_per_node": 8,
    "inter_node_link": {"latency": "20us", "bandwidth": "50GB/s"},
    "links": [{"src": 0, "dst": 1, "bandwidth": "64GiB/s"}],
    "host_link": {"latency": "10us", "bandwidth": "64GB/s"},
    "memory_capacity": ["80GiB", null])"),
                                             "costs.json");
  const CostTable plain = parse_cost_table(table(kBytesAndMs, R"(
    "stages": [{"forward": 1.2, "backward_input": 1.3, "backward_weight": 1, "backward": 2,
                "recompute": 1, "optimizer": 0.5, "activation_bytes": 1610612736, "freed_by_input": 536870912,
                "checkpoint_bytes": 16777216, "parameter_bytes": 2e9, "gradient_bytes": 2e9,
                "optimizer_bytes": 8e9, "output_bytes": 5e7, "offload_bytes": 1073741824,
                "rebuilt_peak_bytes": 1073741824, "workspace_bytes": 268435456}],
    "link": {"latency": 0.005, "bandwidth": 9e8},
    "devices_per_node": 8,
    "inter_node_link": {"latency": 0.02, "bandwidth": 5e7},
    "links": [{"src": 0, "dst": 1, "bandwidth": 68719476.736}],
    "host_link": {"latency": 0.01, "bandwidth": 6.4e7},
    "memory_capacity": [85899345920, null])"),
                                           "costs.json");
  // Times go through a division (1300us / 1ms), so they are compared as doubles; sizes are exact.
  ASSERT_EQ(written.stages.size(), 1u);
  EXPECT_DOUBLE_EQ(written.stages[0].forward, plain.stages[0].forward);
  EXPECT_DOUBLE_EQ(written.stages[0].backward_input, plain.stages[0].backward_input);
  EXPECT_DOUBLE_EQ(written.stages[0].optimizer, plain.stages[0].optimizer);
  EXPECT_EQ(written.stages[0].activation_bytes, 1610612736);
  EXPECT_EQ(written.stages[0].workspace_bytes, 268435456);
  EXPECT_DOUBLE_EQ(written.link.latency, 0.005);
  EXPECT_DOUBLE_EQ(written.link.bandwidth, 9e8);
  EXPECT_DOUBLE_EQ(written.pairs.at(0).link.bandwidth, plain.pairs.at(0).link.bandwidth);
  EXPECT_DOUBLE_EQ(written.pairs.at(0).link.latency, 0.005);  // inherited from "link", in ms already
  EXPECT_DOUBLE_EQ(written.inter_node_link.bandwidth, 5e7);
  EXPECT_DOUBLE_EQ(written.host_link.latency, 0.01);
  EXPECT_EQ(written.memory_capacity, plain.memory_capacity);
  // What the writer makes of it is plain numbers, and reads back equal.
  const std::string rewritten = cost_table_to_json(written);
  EXPECT_EQ(rewritten.find("GiB"), std::string::npos) << rewritten;
  EXPECT_EQ(parse_cost_table(rewritten, "again.json"), written);
}

TEST(CostTableUnits, ASingleCapacityMayBeWrittenWithAUnit) {
  const CostTable costs = parse_cost_table(table(R"("memory_unit": "GB")",
                                                 R"("num_stages": 2, "all_stages": {}, "memory_capacity": "80GiB")"),
                                           "costs.json");
  EXPECT_DOUBLE_EQ(costs.capacity(0), 85.899345920);
}

TEST(CostTableUnits, ErrorsNameTheFileAndTheField) {
  auto error = [](const std::string& units, const std::string& body) {
    return test::error_text([&] { parse_cost_table(table(units, body), "costs.json"); });
  };
  EXPECT_EQ(error(kBytesAndMs, R"("stages": [{}, {"activation_bytes": "1.5 GiBs"}])"),
            "costs.json: stages[1].activation_bytes: '1.5 GiBs' is not a size; write 80GiB, 1.5GB or a bare number "
            "in 'bytes'");
  EXPECT_EQ(error(R"("time_unit": "unit")", R"("stages": [{}], "link": {"latency": "5us"})"),
            "costs.json: link.latency: 5us cannot be converted: the costs measure time in 'unit'; give a bare number "
            "in it");
  EXPECT_EQ(error(R"("time_unit": "ms")", R"("stages": [{}], "memory_capacity": ["80GiB"])"),
            "costs.json: memory_capacity[0]: 80GiB cannot be converted: the costs count memory in 'unit'; give a bare "
            "number in it");
  EXPECT_EQ(error(kBytesAndMs, R"("stages": [{}], "links": [{"src": 0, "dst": 1, "latency": "-1ms"}])"),
            "costs.json: links[0].latency: '-1ms' is not a time of at least 0; write 5us, 2ms or a bare number in "
            "'ms'");
  EXPECT_EQ(error(kBytesAndMs, R"("stages": [{}], "host_link": {"bandwidth": "0GB/s"})"),
            "costs.json: host_link.bandwidth: must be positive (null for unlimited), got 0; for no host link at all, "
            "write \"host_link\": null");
  // Converted sizes are compared as the numbers they stand for.
  EXPECT_EQ(error(kBytesAndMs, R"("stages": [{"activation_bytes": "1KiB", "freed_by_input": "2kB"}])"),
            "costs.json: stages[0].freed_by_input: 2000 exceeds activation_bytes 1024");
}

TEST(CostTableUnits, TheFuzzersSeedWithUnitsReadsAndRoundTrips) {
  // fuzz/run.sh starts the cost table's fuzzer from it; a seed that did not read would start nowhere.
  const CostTable seed = load_cost_table(FLEXPIPE_TEST_DATA "/../../fuzz/seeds/cost_table/units.json");
  EXPECT_EQ(seed.stages.size(), 2u);
  EXPECT_EQ(seed.memory_capacity.at(0), 85899345920.0);
  EXPECT_EQ(parse_cost_table(cost_table_to_json(seed), "again.json"), seed);
}

}  // namespace
}  // namespace flexpipe
