// The simulation-checked planner on a zoo model: the plan it returns passes the simulation it was checked by.
#include <gtest/gtest.h>

#include <algorithm>

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

}  // namespace
}  // namespace flexpipe
