// A partition and back: --partition's text to a Partition, its operator counts and ops: text back, and
// the plan a searched partition becomes.
#include "flexpipe/workflow/partition_forms.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

CostGraph chain(int operators) {
  CostGraph graph;
  graph.name = "chain";
  for (int i = 0; i < operators; ++i) {
    OperatorNode node;
    node.name = "op" + std::to_string(i);
    graph.nodes.push_back(node);
  }
  return graph;
}

TEST(PartitionForms, OpsTextGivesThePartitionAndThePartitionGivesItBack) {
  const CostGraph graph = chain(7);
  const Partition partition = parse_partition(graph, "ops:2,4,1", 3);
  EXPECT_EQ(partition.stage_of_node, (std::vector<int>{0, 0, 1, 1, 1, 1, 2}));
  EXPECT_EQ(operators_per_stage(partition), (std::vector<int>{2, 4, 1}));
  EXPECT_EQ(operators_spec(partition), "ops:2,4,1");
  EXPECT_EQ(parse_partition(graph, operators_spec(partition), 3), partition);
}

TEST(PartitionForms, ABadFieldOrAnotherStageCountIsRefused) {
  const CostGraph graph = chain(4);
  try {
    parse_partition(graph, "ops:2,x", 2);
    FAIL() << "accepted ops:2,x";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--partition ops:: 'x' is not a count (field 2)");
  }
  try {
    parse_partition(graph, "ops:2,2", 3);
    FAIL() << "accepted two stages for three";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--partition makes 2 stages but the schedule has 3");
  }
}

TEST(PartitionForms, APartitionBecomesAPlanWhoseStagesNameTheirEnds) {
  const CostGraph graph = chain(6);
  const Partition partition = parse_partition(graph, "ops:1,2,2,1", 4);
  const PartitionPlan plan = plan_of_partition(graph, partition, {"g.json", "zb-h1", 2, 4, "search"});
  EXPECT_EQ(plan.model, "g.json");
  EXPECT_EQ(plan.graph, "chain");
  EXPECT_EQ(plan.graph_operators, 6);
  EXPECT_EQ(plan.hardware, "cpu");
  EXPECT_EQ(plan.schedule, "zb-h1");
  EXPECT_EQ(plan.devices, 2);
  EXPECT_EQ(plan.microbatches, 4);
  EXPECT_EQ(plan.chunks, 2);
  EXPECT_EQ(plan.method, "search");
  ASSERT_EQ(plan.stages.size(), 4u);
  EXPECT_EQ(plan.stages[1].operators, 2);
  EXPECT_EQ(plan.stages[1].report["first"], "op1");
  EXPECT_EQ(plan.stages[1].report["last"], "op2");
  EXPECT_EQ(plan.stages[3].report["first"], "op5");
  EXPECT_TRUE(plan.stages[0].recompute.empty());
}

}  // namespace
}  // namespace flexpipe
