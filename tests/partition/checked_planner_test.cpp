// The simulation-checked planner on a zoo model: the plan it returns passes the simulation it was checked by.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/partition/checked_planner.h"
#include "flexpipe/schedules/builtin.h"

namespace flexpipe {
namespace {

TEST(CheckedPlanner, DawnsPlanFitsInSimulation) {
  const HardwareProfile& hardware = find_hardware("H100-80GB");
  PlannerSettings settings;
  settings.model = "gpt3-1.3b";
  settings.schedule = "1f1b";
  settings.microbatch_size = 2;
  settings.memory_limit = 12e9;
  settings.host_bandwidth = hardware.pcie_bandwidth;
  settings.host_bandwidth_per_time_unit = hardware.pcie_bandwidth / 1e3;  // zoo graphs measure milliseconds
  const CheckedPlanner planner(build_model_graph(find_model("gpt3-1.3b"), hardware, {.microbatch_size = 2}), hardware,
                               make_builtin("1f1b", {4, 8, 0}), settings);
  const CheckedPlan out = planner.plan(PartitionMethod::Dawn);
  ASSERT_TRUE(out.passes());
  EXPECT_GE(out.rounds, 1);
  EXPECT_EQ(out.microbatch_size, 2);
  EXPECT_EQ(out.max_microbatch_size, -1);
  EXPECT_EQ(out.plan.model, "gpt3-1.3b");
  EXPECT_EQ(out.plan.stages.size(), 4u);
  EXPECT_EQ(out.plan.summary["fits"], true);
  for (const DeviceReport& device : out.simulated.devices) EXPECT_LE(device.peak_memory, 12e9);
}

// What the planner says as it goes: each of Dawn's three candidates in turn, the partitioner's phases
// within each, and the simulation check after each plan; listening changes nothing.
TEST(CheckedPlanner, SaysWhatItDoesCandidateByCandidate) {
  const HardwareProfile& hardware = find_hardware("H100-80GB");
  PlannerSettings settings;
  settings.model = "gpt3-1.3b";
  settings.schedule = "1f1b";
  settings.memory_limit = 12e9;
  const CheckedPlanner quiet(build_model_graph(find_model("gpt3-1.3b"), hardware), hardware,
                             make_builtin("1f1b", {4, 8, 0}), settings);
  std::vector<std::string> said;
  settings.progress = [&](const std::string& text) { said.push_back(text); };
  const CheckedPlanner planner(build_model_graph(find_model("gpt3-1.3b"), hardware), hardware,
                               make_builtin("1f1b", {4, 8, 0}), settings);
  const CheckedPlan out = planner.plan(PartitionMethod::Dawn);
  EXPECT_EQ(out.result.starts(), quiet.plan(PartitionMethod::Dawn).result.starts());
  EXPECT_FALSE(out.stopped);
  ASSERT_FALSE(said.empty());
  EXPECT_EQ(said.front().rfind("dawn, micro-batch 1, round 1: a partition that fits, step 0", 0), 0u) << said.front();
  size_t at = 0;
  for (const std::string prefix :
       {"dawn, micro-batch 1, round 1: stage decisions", "dawn, micro-batch 1, round 1: simulation check",
        "dawn (compute-balanced cuts), micro-batch 1, round 1: stage decisions",
        "dawn (whole-layer decisions), micro-batch 1, round 1: "}) {
    const auto it = std::find_if(said.begin() + at, said.end(),
                                 [&](const std::string& text) { return text.rfind(prefix, 0) == 0; });
    ASSERT_NE(it, said.end()) << prefix;
    at = it - said.begin();
  }
}

// Stopped from the start (a spent time budget), each search answers with the first plan it finds.
TEST(CheckedPlanner, AnswersWhenToldToStop) {
  const HardwareProfile& hardware = find_hardware("H100-80GB");
  PlannerSettings settings;
  settings.model = "gpt3-1.3b";
  settings.schedule = "1f1b";
  settings.memory_limit = 12e9;
  settings.should_stop = [] { return true; };
  const CheckedPlanner planner(build_model_graph(find_model("gpt3-1.3b"), hardware), hardware,
                               make_builtin("1f1b", {4, 8, 0}), settings);
  const CheckedPlan out = planner.plan(PartitionMethod::Dawn);
  EXPECT_TRUE(out.stopped);
  EXPECT_TRUE(out.passes());
  EXPECT_EQ(out.plan.summary["time_budget_reached"], true);
}

}  // namespace
}  // namespace flexpipe
