// Tests of the cost table: the uniform shorthand, its command-line form and its refusals.
#include "flexpipe/costs/cost_table.h"

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse_cost_table(text, "costs.json"); });
}

// A document with the required header and `body` after it.
std::string document(const std::string& body) {
  return "{\"format\": \"flexpipe-costs\", \"version\": 1, " + body + "}";
}

TEST(UniformCosts, SetsEveryFieldOfTheShorthand) {
  const CostTable costs = uniform_costs(3, 1.5, 2, 0.5, 0.25);
  ASSERT_EQ(costs.stages.size(), 3u);
  for (const StageCosts& stage : costs.stages) {
    EXPECT_EQ(stage.forward, 1.5);
    EXPECT_EQ(stage.backward_input, 2);
    EXPECT_EQ(stage.backward_weight, 0.5);
    EXPECT_EQ(stage.backward, 2.5);
    EXPECT_EQ(stage.recompute, 1.5);
    EXPECT_EQ(stage.optimizer, 0);
    EXPECT_EQ(stage.activation_bytes, 1);
    EXPECT_EQ(stage.freed_by_input, 0);
    EXPECT_EQ(stage.checkpoint_bytes, 0);
    EXPECT_EQ(stage.parameter_bytes + stage.gradient_bytes + stage.optimizer_bytes, 0);
    EXPECT_EQ(stage.output_bytes, 0);
  }
  EXPECT_EQ(costs.link.latency, 0.25);
  EXPECT_EQ(costs.link.bandwidth, kInfinity);
  EXPECT_EQ(costs.link.transfer_time(1e9), 0.25);
  EXPECT_TRUE(costs.memory_capacity.empty());
  EXPECT_EQ(costs.capacity(7), kInfinity);
}

TEST(UniformCosts, ParsesTheCommandLineForm) {
  EXPECT_EQ(parse_uniform_costs("1,2,3", 2), uniform_costs(2, 1, 2, 3, 0));
  EXPECT_EQ(parse_uniform_costs("1, 1, 1, 0.5", 4), uniform_costs(4, 1, 1, 1, 0.5));
  EXPECT_EQ(parse_uniform_costs("2,1e-1,0,1", 1), uniform_costs(1, 2, 0.1, 0, 1));
}

TEST(UniformCosts, RejectsBadInputExactly) {
  auto parse = [](const std::string& text) { return error_of([&] { parse_uniform_costs(text, 2); }); };
  EXPECT_EQ(parse("1,x"), "--uniform-costs: expected F,I,W[,COMM], got '1,x'");
  EXPECT_EQ(parse("1,1"), "--uniform-costs: expected F,I,W[,COMM], got '1,1'");
  EXPECT_EQ(parse("1,1,1,1,1"), "--uniform-costs: expected F,I,W[,COMM], got '1,1,1,1,1'");
  EXPECT_EQ(parse("1,1,1,"), "--uniform-costs: expected F,I,W[,COMM], got '1,1,1,'");
  EXPECT_EQ(parse("1,1,inf"), "--uniform-costs: expected F,I,W[,COMM], got '1,1,inf'");
  EXPECT_EQ(parse(""), "--uniform-costs: expected F,I,W[,COMM], got ''");
  EXPECT_EQ(parse("1,-1,1"), "--uniform-costs: I must not be negative, got '1,-1,1'");
  EXPECT_EQ(parse("1,1,1,-2"), "--uniform-costs: COMM must not be negative, got '1,1,1,-2'");
}

CostTable rich_table() {
  CostTable costs;
  StageCosts first;
  first.forward = 1.25;
  first.backward_input = 2;
  first.backward_weight = 1.5;
  first.backward = 3.5;
  first.recompute = 1.25;
  first.optimizer = 0.125;
  first.activation_bytes = 3e9;
  first.freed_by_input = 1e9;
  first.checkpoint_bytes = 2.5e8;
  first.parameter_bytes = 7;
  first.gradient_bytes = 7;
  first.optimizer_bytes = 14;
  first.output_bytes = 1.0 / 3.0;
  StageCosts second = first;
  second.forward = 0.1;
  second.recompute = 0;
  second.offload_bytes = 1.5e9;  // the first stage keeps the default: everything it holds
  second.rebuilt_peak_bytes = 1e9;
  second.workspace_bytes = 2e8;           // the first stage keeps the default: none
  second.checkpoint_until_weight = true;  // the first: released at I
  costs.stages = {first, second};
  costs.link = Link{0.01, 100};
  costs.pairs = {LinkOverride{0, 1, Link{0.5, kInfinity}}, LinkOverride{1, 0, Link{0, 25, 0.02, 0.01, 40, 0.3}}};
  costs.host_link = Link{1, 8};
  costs.memory_capacity = {80e9, kInfinity};
  costs.overlap_ratio = 0.75;
  costs.time_unit = "ms";
  costs.memory_unit = "bytes";
  return costs;
}

TEST(CostTableJson, RoundTripsEveryField) {
  const CostTable costs = rich_table();
  EXPECT_EQ(parse_cost_table(cost_table_to_json(costs), "written"), costs);
  const CostTable uniform = uniform_costs(4, 1, 2, 3, 0.5);
  const std::string text = cost_table_to_json(uniform);
  EXPECT_NE(text.find("\"all_stages\""), std::string::npos) << text;
  EXPECT_EQ(parse_cost_table(text, "written"), uniform);
  // offload_bytes is written only where it is finite.
  const std::string rich = cost_table_to_json(costs);
  EXPECT_EQ(rich.find("\"offload_bytes\""), rich.rfind("\"offload_bytes\"")) << rich;
  EXPECT_NE(rich.find("\"offload_bytes\": 1500000000"), std::string::npos) << rich;
  EXPECT_EQ(text.find("offload_bytes"), std::string::npos) << text;
  EXPECT_EQ(rich.find("\"workspace_bytes\""), rich.rfind("\"workspace_bytes\"")) << rich;
  EXPECT_NE(rich.find("\"workspace_bytes\": 200000000"), std::string::npos) << rich;
  CostTable one_capacity = uniform;
  one_capacity.memory_capacity = {16};
  EXPECT_EQ(parse_cost_table(cost_table_to_json(one_capacity), "written"), one_capacity);
  CostTable two_levels = uniform;
  two_levels.devices_per_node = 2;
  two_levels.inter_node_link = {3, 50};
  EXPECT_EQ(parse_cost_table(cost_table_to_json(two_levels), "written"), two_levels);
  // A link's host-time fields are written only where a transport gave them.
  EXPECT_NE(rich.find("\"send_cpu\": 0.02"), std::string::npos) << rich;
  EXPECT_EQ(rich.find("\"send_cpu\""), rich.rfind("\"send_cpu\"")) << rich;
  EXPECT_EQ(text.find("cpu"), std::string::npos) << text;
  // checkpoint_until_weight is written only where it is true.
  EXPECT_EQ(rich.find("\"checkpoint_until_weight\": true"), rich.rfind("\"checkpoint_until_weight\"")) << rich;
  EXPECT_EQ(parse_error(document("\"stages\": [{\"checkpoint_until_weight\": 1}]")),
            "costs.json: stages[0].checkpoint_until_weight: must be true or false");
}

// Devices 0 1 | 2 3: within a node `link`, across nodes `inter_node_link`, an override over both.
TEST(CostTableJson, ReadsTwoLevelsOfDevices) {
  const CostTable costs = parse_cost_table(
      document("\"num_stages\": 4, \"all_stages\": {}, \"link\": {\"latency\": 1}, \"devices_per_node\": 2, "
               "\"inter_node_link\": {\"latency\": 5, \"bandwidth\": 10}, \"links\": [{\"src\": 3, \"dst\": 0}]"),
      "c");
  EXPECT_EQ(costs.link_between(0, 1), (Link{1, kInfinity}));
  EXPECT_EQ(costs.link_between(2, 3), (Link{1, kInfinity}));
  EXPECT_EQ(costs.link_between(1, 2), (Link{5, 10}));
  EXPECT_EQ(costs.link_between(2, 1), (Link{5, 10}));
  EXPECT_EQ(costs.link_between(3, 0), (Link{1, kInfinity}));  // the override, its fields from "link"
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"inter_node_link\": {\"latency\": 5}")),
            "costs.json: inter_node_link: needs \"devices_per_node\" (which devices share a node)");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"devices_per_node\": 0")),
            "costs.json: devices_per_node: must be at least 1");
}

// No host link (a search that may not offload measures with one) is written as null and read back,
// where a bandwidth of 0 would be refused.
TEST(CostTableJson, NoHostLinkIsNullAndReadsBack) {
  CostTable costs = uniform_costs(2, 1, 1, 1);
  costs.host_link = kNoHostLink;
  const std::string text = cost_table_to_json(costs);
  EXPECT_NE(text.find("\"host_link\": null"), std::string::npos) << text;
  EXPECT_EQ(parse_cost_table(text, "written"), costs);
  costs.host_link = Link{0.5, 0};  // a latency over no bandwidth is no host link either
  EXPECT_EQ(parse_cost_table(cost_table_to_json(costs), "written").host_link, kNoHostLink);
}

// Which costs a table states rather than leaves to defaults: R's time per stage, the host link.
TEST(CostTableJson, SaysWhichCostsAreStated) {
  StatedCosts stated;
  parse_cost_table(document("\"stages\": [{\"recompute\": 1}, {\"forward\": 2}], \"host_link\": {}"), "c", 0, &stated);
  EXPECT_EQ(stated.recompute, (std::vector<char>{1, 0}));
  EXPECT_TRUE(stated.host_link);
  parse_cost_table(document("\"num_stages\": 3, \"all_stages\": {\"recompute\": 2}, \"host_link\": null"), "c", 0,
                   &stated);
  EXPECT_EQ(stated.recompute, (std::vector<char>{1, 1, 1}));
  EXPECT_FALSE(stated.host_link);
  parse_cost_table(document("\"num_stages\": 2, \"all_stages\": {}"), "c", 0, &stated);
  EXPECT_EQ(stated.recompute, (std::vector<char>{0, 0}));
  EXPECT_FALSE(stated.host_link);
}

TEST(CostTableJson, FillsDefaults) {
  const CostTable costs = parse_cost_table(
      document("\"stages\": [{\"forward\": 2, \"backward_input\": 3}, {\"backward\": 9, \"recompute\": 0.5}]"), "c");
  ASSERT_EQ(costs.stages.size(), 2u);
  EXPECT_EQ(costs.stages[0].forward, 2);
  EXPECT_EQ(costs.stages[0].backward_weight, 1);
  EXPECT_EQ(costs.stages[0].backward, 4);   // I + W
  EXPECT_EQ(costs.stages[0].recompute, 2);  // F
  EXPECT_EQ(costs.stages[0].activation_bytes, 1);
  EXPECT_EQ(costs.stages[0].offload_bytes, kInfinity);  // OFFLOAD moves everything held
  EXPECT_EQ(costs.stages[1].backward, 9);
  EXPECT_EQ(costs.stages[1].recompute, 0.5);
  EXPECT_EQ(costs.link, Link{});
  EXPECT_EQ(costs.host_link, Link{});
  EXPECT_TRUE(costs.memory_capacity.empty());
  EXPECT_EQ(costs.overlap_ratio, 1.0);
  EXPECT_EQ(costs.time_unit, "unit");
}

TEST(CostTableJson, ReadsSharedStagesLinksAndCapacities) {
  const CostTable costs = parse_cost_table(
      document("\"num_stages\": 3, \"all_stages\": {\"forward\": 4}, \"link\": {\"latency\": 2, \"bandwidth\": 10}, "
               "\"links\": [{\"src\": 1, \"dst\": 0, \"bandwidth\": null}], \"memory_capacity\": [5, null]"),
      "c");
  ASSERT_EQ(costs.stages.size(), 3u);
  EXPECT_EQ(costs.stages[2].forward, 4);
  EXPECT_EQ(costs.link_between(0, 1), (Link{2, 10}));
  EXPECT_EQ(costs.link_between(1, 0), (Link{2, kInfinity}));  // latency inherited from "link"
  EXPECT_EQ(costs.capacity(0), 5);
  EXPECT_EQ(costs.capacity(1), kInfinity);
}

TEST(CostTableJson, SyntaxErrorsGiveLineAndColumn) {
  EXPECT_EQ(parse_error("{\n  \"format\": \"flexpipe-costs\",\n  \"version\": 1,\n  \"stages\": [x]\n}"),
            "costs.json:4:14: invalid JSON: syntax error while parsing value - invalid literal; last read: "
            "'\"stages\": [x'");
  EXPECT_EQ(parse_error("{\"version\": 1"),
            "costs.json:1:14: invalid JSON: syntax error while parsing object - unexpected end of input; "
            "expected '}'");
}

TEST(CostTableJson, NamesTheBadFieldExactly) {
  EXPECT_EQ(parse_error(document("\"stages\": [{}, {}, {\"forward\": \"x\"}]")),
            "costs.json: stages[2].forward: 'x' is not a time; write a bare number in 'unit'");
  EXPECT_EQ(parse_error(document("\"stages\": [{}, {\"forward\": -1}]")),
            "costs.json: stages[1].forward: must not be negative, got -1");
  EXPECT_EQ(parse_error(document("\"stages\": [{\"forwrad\": 1}]")),
            "costs.json: stages[0].forwrad: unknown key (known keys: forward, backward_input, backward_weight, "
            "backward, recompute, optimizer, activation_bytes, freed_by_input, checkpoint_bytes, parameter_bytes, "
            "gradient_bytes, optimizer_bytes, output_bytes, offload_bytes, rebuilt_peak_bytes, workspace_bytes, "
            "checkpoint_until_weight)");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"latency\": 1")),
            "costs.json: latency: unknown key (known keys: format, version, time_unit, memory_unit, stages, "
            "all_stages, num_stages, link, links, host_link, memory_capacity, overlap_ratio, devices_per_node, "
            "inter_node_link)");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"link\": {\"latency\": true}")),
            "costs.json: link.latency: expected a number, got true");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"host_link\": {\"bandwidth\": 0}")),
            "costs.json: host_link.bandwidth: must be positive (null for unlimited), got 0; for no host link at all, "
            "write \"host_link\": null");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"link\": {\"bandwidth\": 0}")),
            "costs.json: link.bandwidth: must be positive (null for unlimited), got 0");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"link\": {\"send_cpu\": -0.5}")),
            "costs.json: link.send_cpu: must not be negative, got -0.5");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"links\": [{\"src\": 0, \"dst\": 1, \"rendezvous\": -2}]")),
            "costs.json: links[0].rendezvous: must not be negative, got -2");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"links\": [{\"src\": 0, \"dst\": 1, \"cpu_bandwidth\": 0}]")),
            "costs.json: links[0].cpu_bandwidth: must be positive (null for unlimited), got 0");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"links\": [{\"src\": 0, \"dst\": 1.5}]")),
            "costs.json: links[0].dst: expected an integer, got 1.5");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"links\": [{\"src\": 0}]")),
            "costs.json: links[0].dst: missing (a link names its \"src\" and \"dst\" devices)");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"links\": [{\"src\": 0, \"dst\": 1}, {\"src\": 0, \"dst\": 1}]")),
            "costs.json: links[1]: repeats the link 0 -> 1 of links[0]");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"memory_capacity\": [1, \"big\"]")),
            "costs.json: memory_capacity[1]: 'big' is not a size; write a bare number in 'unit'");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"memory_capacity\": {}")),
            "costs.json: memory_capacity: expected a number or an array of numbers, got an object");
  EXPECT_EQ(parse_error(document("\"stages\": [{\"activation_bytes\": 2, \"freed_by_input\": 3}]")),
            "costs.json: stages[0].freed_by_input: 3 exceeds activation_bytes 2");
  EXPECT_EQ(parse_error(document("\"stages\": [{\"offload_bytes\": -2}]")),
            "costs.json: stages[0].offload_bytes: must not be negative, got -2");
  EXPECT_EQ(parse_error(document("\"stages\": []")), "costs.json: stages: needs at least one stage");
  EXPECT_EQ(parse_error(document("\"stages\": [{}], \"all_stages\": {}")),
            "costs.json: all_stages: cannot be combined with \"stages\"");
  EXPECT_EQ(parse_error(document("\"all_stages\": {}")),
            "costs.json: all_stages: needs \"num_stages\" (how many stages share these costs)");
  EXPECT_EQ(parse_error(document("\"time_unit\": \"s\"")),
            "costs.json: no stage costs: give \"stages\" (one entry per stage) or \"all_stages\" with \"num_stages\"");
  EXPECT_EQ(parse_error("{\"version\": 1, \"stages\": [{}]}"),
            "costs.json: format: missing (a cost table starts with \"format\": \"flexpipe-costs\")");
  EXPECT_EQ(parse_error("{\"format\": \"flexpipe-schedule\", \"version\": 1}"),
            "costs.json: format: expected \"flexpipe-costs\", got \"flexpipe-schedule\"");
  EXPECT_EQ(parse_error("{\"format\": \"flexpipe-costs\", \"version\": 2}"),
            "costs.json: version: unsupported version 2 (this build reads version 1)");
  EXPECT_EQ(parse_error("[1]"), "costs.json: expected a JSON object at the top level, got an array");
}

TEST(CheckCostTable, SaysWhatDoesNotFit) {
  auto check = [](const CostTable& costs, int stages, int devices) {
    return error_of([&] { check_cost_table(costs, stages, devices, "costs.json"); });
  };
  EXPECT_EQ(check(uniform_costs(4, 1, 1, 1), 4, 4), "(no error)");
  EXPECT_EQ(check(uniform_costs(1, 1, 1, 1), 4, 4),
            "costs.json: 1 stage entry for a schedule with 4 stages per pipeline (one entry is not repeated for "
            "every stage: write it as \"all_stages\" with \"num_stages\": 4)");
  EXPECT_EQ(check(uniform_costs(3, 1, 1, 1), 4, 4),
            "costs.json: 3 stage entries for a schedule with 4 stages per pipeline");
  CostTable capacities = uniform_costs(4, 1, 1, 1);
  capacities.memory_capacity = {1, 2, 3};
  EXPECT_EQ(check(capacities, 4, 4),
            "costs.json: memory_capacity has 3 entries for 4 devices (give one number for every device, or one "
            "entry per device)");
  capacities.memory_capacity = {1};
  EXPECT_EQ(check(capacities, 4, 4), "(no error)");
  CostTable far = uniform_costs(4, 1, 1, 1);
  far.pairs = {LinkOverride{0, 4, Link{}}};
  EXPECT_EQ(check(far, 4, 4), "costs.json: links[0]: device 4 does not exist in a schedule with 4 devices");
}

TEST(CostTableFile, ErrorsNameTheFile) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() / "flexpipe_costs_test.json";
  std::ofstream(path) << document("\"stages\": [{\"forward\": \"slow\"}]");
  EXPECT_EQ(error_of([&] { load_cost_table(path.string()); }),
            path.string() + ": stages[0].forward: 'slow' is not a time; write a bare number in 'unit'");
  std::ofstream(path) << cost_table_to_json(rich_table());
  EXPECT_EQ(load_cost_table(path.string()), rich_table());
  std::filesystem::remove(path);
  EXPECT_EQ(error_of([&] { load_cost_table(path.string()); }),
            path.string() + ": cannot read: No such file or directory");
}

}  // namespace
}  // namespace flexpipe
