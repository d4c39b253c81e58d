// A measured graph against a hardware profile, on a device of round numbers: 1e12 FLOP/s, 1e11 B/s,
// efficiency 0.5, times in milliseconds.
#include "flexpipe/costs/hardware_check.h"

#include <string>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

HardwareProfile round_device() {
  HardwareProfile device;
  device.name = "round";
  device.peak_flops = 1e12;
  device.hbm_bandwidth = 1e11;
  device.efficiency = 0.5;
  return device;
}

OperatorNode node(const std::string& name, double time, ShapePolynomial flops, ShapePolynomial bytes) {
  OperatorNode n;
  n.name = name;
  n.forward = {time, flops, bytes};
  return n;
}

CostGraph measured_graph() {
  CostGraph graph;
  graph.name = "measured";
  graph.reference = {2, 8};
  // matmul: 2e9 FLOPs (1.25e8 per token of 16 tokens) = 2 ms at peak, 1e7 bytes = 0.1 ms: compute-bound,
  // predicted 4 ms at half the peak; measured 5 ms, so 40% of peak: 20% off, which is not more than 20%.
  graph.nodes.push_back(node("matmul", 5, per_token(1.25e8), fixed_amount(1e7)));
  // copy: 1e6 FLOPs = 0.001 ms, 1e9 bytes = 10 ms: memory-bound, predicted 20 ms; measured 12.5 ms,
  // 80% of the bandwidth: 60% off.
  OperatorNode copy = node("copy", 12.5, fixed_amount(1e6), fixed_amount(1e9));
  // Its weight gradient: 1e9 FLOPs = 1 ms, predicted 2 ms, measured 2 ms: compute-bound at 50%.
  copy.backward_weight = {2, fixed_amount(1e9), {}};
  // Its input gradient has no time measured, and a reshape neither FLOPs nor bytes: nothing to compare.
  copy.backward_input = {0, fixed_amount(1e6), fixed_amount(1e9)};
  graph.nodes.push_back(copy);
  graph.nodes.push_back(node("reshape", 0.01, {}, {}));
  return graph;
}

TEST(HardwareCheck, SetsEachPassAgainstTheRooflineAtTheProfilesEfficiency) {
  const HardwareCheck check = check_against_hardware(measured_graph(), round_device());
  EXPECT_EQ(check.hardware, "round");
  EXPECT_DOUBLE_EQ(check.efficiency, 0.5);
  ASSERT_EQ(check.passes.size(), 3u);
  const PassComparison& matmul = check.passes[0];
  EXPECT_EQ(matmul.node, "matmul");
  EXPECT_EQ(matmul.pass, Pass::Forward);
  EXPECT_TRUE(matmul.compute_bound);
  EXPECT_DOUBLE_EQ(matmul.measured, 5);
  EXPECT_DOUBLE_EQ(matmul.predicted, 4);
  EXPECT_DOUBLE_EQ(matmul.achieved, 0.4);
  const PassComparison& copy = check.passes[1];
  EXPECT_EQ(copy.node, "copy");
  EXPECT_FALSE(copy.compute_bound);
  EXPECT_DOUBLE_EQ(copy.predicted, 20);
  EXPECT_DOUBLE_EQ(copy.achieved, 0.8);
  const PassComparison& weight = check.passes[2];
  EXPECT_EQ(weight.pass, Pass::BackwardWeight);
  EXPECT_TRUE(weight.compute_bound);
  EXPECT_DOUBLE_EQ(weight.predicted, 2);
  EXPECT_DOUBLE_EQ(weight.achieved, 0.5);
  // Only the copy is more than 20% off.
  EXPECT_FALSE(matmul.off);
  EXPECT_TRUE(copy.off);
  EXPECT_FALSE(weight.off);
  EXPECT_EQ(check.off, 1);
  // Compute-bound: (2 + 1) ms at peak over (5 + 2) ms measured; memory-bound: 10 over 12.5.
  EXPECT_DOUBLE_EQ(check.compute_efficiency, 3.0 / 7.0);
  EXPECT_DOUBLE_EQ(check.memory_efficiency, 0.8);
}

TEST(HardwareCheck, ReadsTheGraphsTimeUnit) {
  CostGraph graph = measured_graph();
  graph.time_unit = "us";  // the same numbers are now a thousand times shorter: peak is reached 1000x over
  const HardwareCheck check = check_against_hardware(graph, round_device());
  EXPECT_DOUBLE_EQ(check.passes[0].predicted, 4000);
  EXPECT_DOUBLE_EQ(check.passes[0].achieved, 400);
  EXPECT_EQ(check.off, 3);
}

void expect_refused(const CostGraph& graph, const std::string& message) {
  try {
    check_against_hardware(graph, round_device());
    ADD_FAILURE() << "expected: " << message;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(HardwareCheck, RefusesTimesThatAreNotTimesAndGraphsWithNothingToCompare) {
  CostGraph graph = measured_graph();
  graph.time_unit = "unit";
  expect_refused(
      graph, "measured: its times are in 'unit', not a unit of time: there is no measurement to compare with round");
  graph = measured_graph();
  graph.nodes = {node("reshape", 0.01, {}, {})};
  expect_refused(graph, "measured: no operator pass has both a measured time and FLOPs or bytes to predict it from");
}

}  // namespace
}  // namespace flexpipe
