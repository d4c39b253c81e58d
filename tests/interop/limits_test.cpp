// What every reader does with numbers and counts no real file holds: one located error, before any
// allocation the count would ask for.
#include <string>

#include <gtest/gtest.h>

#include "error_text.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/interop/schedule_json.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

const std::string kSharedTable = R"({"format": "flexpipe-costs", "version": 1, "num_stages": 2,
  "all_stages": {"forward": 10, "backward_input": 10, "backward_weight": 10}})";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  return text.replace(text.find(from), from.size(), to);
}

TEST(ReaderLimits, ANumberBeyondADoubleIsALocatedError) {
  const std::string table = replaced(kSharedTable, "\"forward\": 10", "\"forward\": 1e999");
  EXPECT_EQ(test::error_text([&] { parse_cost_table(table, "costs.json"); }),
            "costs.json:2:29: invalid JSON: number 1e999 is out of range (a double holds up to about 1.8e308)");
  // The same shape from every JSON reader, whatever it reads.
  const std::string text = "{\"format\": \"x\",\n  \"version\": -2e400}";
  for (auto read : {+[](const std::string& t) { parse_cost_graph(t, "f.json"); },
                    +[](const std::string& t) { parse_schedule_json(t, "f.json"); },
                    +[](const std::string& t) { parse_partition_plan(t, "f.json"); }}) {
    const std::string error = test::error_text([&] { read(text); });
    EXPECT_TRUE(error.starts_with("f.json:2:14: ")) << error;
    EXPECT_TRUE(error.ends_with("number -2e400 is out of range (a double holds up to about 1.8e308)")) << error;
  }
}

TEST(ReaderLimits, ASharedStageCountIsCheckedBeforeTheTableIsExpanded) {
  // 50 million stages from a 100-byte file: refused, not allocated.
  const std::string huge = replaced(kSharedTable, "\"num_stages\": 2", "\"num_stages\": 50000000");
  EXPECT_EQ(test::error_text([&] { parse_cost_table(huge, "costs.json"); }),
            "costs.json: num_stages: is too large, got 50000000 (a schedule has at most 1048576 stages)");
  // Against the schedule it is for, any mismatch is refused the same way.
  EXPECT_EQ(test::error_text([&] { parse_cost_table(huge, "costs.json", 4); }),
            "costs.json: num_stages: 50000000 stages for a schedule with 4 stages per pipeline");
  EXPECT_EQ(parse_cost_table(kSharedTable, "costs.json", 2).stages.size(), 2u);
}

TEST(ReaderLimits, ACountBeyondAnIntIsALocatedErrorNotAnOverflow) {
  PartitionPlan plan;
  plan.devices = 2;
  plan.stages.emplace_back().operators = 3;
  const std::string text = partition_plan_to_json(plan);
  EXPECT_EQ(parse_partition_plan(text, "plan.json").devices, 2);
  // The case the fuzzer found: 1e26 passed the number check and was then converted to int.
  EXPECT_EQ(test::error_text(
                [&] { parse_partition_plan(replaced(text, "\"devices\": 2", "\"devices\": 1e26"), "plan.json"); }),
            "plan.json: devices: must be a whole number of at most 2147483647, got 1e+26");
  EXPECT_EQ(test::error_text(
                [&] { parse_partition_plan(replaced(text, "\"devices\": 2", "\"devices\": 2.5"), "plan.json"); }),
            "plan.json: devices: must be a whole number of at most 2147483647, got 2.5");
  EXPECT_EQ(test::error_text(
                [&] { parse_partition_plan(replaced(text, "\"operators\": 3", "\"operators\": 0"), "plan.json"); }),
            "plan.json: stages[0].operators: must be a positive integer, got 0");
}

// nlohmann's parser holds any depth, but its copies, comparisons and dumps recurse once per level:
// every reader refuses what nests deeper than kMaxJsonNesting, at the bracket that goes too deep.
TEST(ReaderLimits, JsonNestedBeyondTheLimitIsALocatedErrorNotAStackOverflow) {
  const std::string deep =
      "{\"format\": \"x\",\n \"a\": " + std::string(200'000, '[') + std::string(200'000, ']') + "}";
  EXPECT_EQ(test::error_text([&] { parse_cost_table(deep, "f.json"); }),
            "f.json:2:1006: invalid JSON: arrays and objects nest deeper than 1000 levels");
  EXPECT_EQ(test::error_text([&] { parse_cost_graph(deep, "f.json"); }),
            "f.json:2:1006: invalid JSON: arrays and objects nest deeper than 1000 levels");
  EXPECT_EQ(test::error_text([&] { parse_schedule_json(deep, "f.json"); }),
            "f.json:2:1006: JSON syntax error: arrays and objects nest deeper than 1000 levels");
  EXPECT_EQ(test::error_text([&] { parse_partition_plan(deep, "f.json"); }),
            "f.json:2:1006: partition plan: arrays and objects nest deeper than 1000 levels");
  // Brackets inside strings are text, and at the limit a document still reads.
  const std::string at_limit = "{\"format\": \"x[[{\", \"a\": " + std::string(999, '[') + std::string(999, ']') + "}";
  EXPECT_EQ(test::error_text([&] { parse_cost_table(at_limit, "f.json"); }),
            "f.json: a: unknown key (known keys: format, version, time_unit, memory_unit, stages, all_stages, "
            "num_stages, link, links, host_link, memory_capacity, overlap_ratio, devices_per_node, inter_node_link)");
}

}  // namespace
}  // namespace flexpipe
