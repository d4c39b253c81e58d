// train --model GRAPH without --plan: the partition request it makes is `flexpipe partition`'s default
// for the run (its schedule, devices, micro-batches and chunks, the graph's micro-batch, DawnPiper's
// method, the hardware's memory), and the plans it writes lie next to the graph.
#include "flexpipe/workflow/captured_plan.h"

#include <gtest/gtest.h>

#include "flexpipe/workflow/auto_schedule.h"

namespace flexpipe {
namespace {

TrainRequest captured_run(const std::string& schedule) {
  TrainRequest o;
  o.command.captured_model = "/tmp/model.graph.json";
  o.command.request.captured_graph.reference.microbatch_size = 2;
  o.command.request.training.microbatch_size = 4;  // train's default for its own model: not the graph's
  o.schedule = schedule;
  return o;
}

TEST(DefaultPartitionRequest, IsThePartitionersDefaultForTheRunsScheduleOnTrainsDevices) {
  const PartitionRequest request = default_partition_request(captured_run("1f1b"));
  EXPECT_EQ(request.model.model, "/tmp/model.graph.json");
  EXPECT_EQ(request.model.hardware, "H100-80GB");
  EXPECT_EQ(request.model.microbatch_size, 2);
  EXPECT_EQ(request.schedule.spec, "1f1b");
  EXPECT_EQ(request.schedule.devices, 2);       // train's -p default, not partition's 4
  EXPECT_EQ(request.schedule.microbatches, 0);  // the schedule's own default, as training loads it
  EXPECT_EQ(request.schedule.chunks, 0);
  EXPECT_EQ(request.memory_limit, (Quantity{80e9, "GB"}));
  EXPECT_EQ(request.method, "dawn");
  EXPECT_EQ(request.solver, "auto");
  EXPECT_FALSE(request.max_batch);
  EXPECT_EQ(request.time_budget, 0);
}

TEST(DefaultPartitionRequest, TakesTheRunsDevicesMicroBatchesAndChunks) {
  TrainRequest o = captured_run("interleaved-1f1b");
  o.command.schedule.devices = 4;
  o.command.schedule.microbatches = 8;
  o.command.schedule.chunks = 2;
  const PartitionRequest request = default_partition_request(o);
  EXPECT_EQ(request.schedule.spec, "interleaved-1f1b");
  EXPECT_EQ(request.schedule.devices, 4);
  EXPECT_EQ(request.schedule.microbatches, 8);
  EXPECT_EQ(request.schedule.chunks, 2);
  // A program file, or -D p=N, says its own devices: none is imposed.
  o.schedule = "my.fps";
  o.command.schedule.devices = 0;
  EXPECT_EQ(default_partition_request(o).schedule.devices, 0);
  o.schedule = "1f1b";
  o.command.schedule.defines = {"p=3"};
  EXPECT_EQ(default_partition_request(o).schedule.devices, 0);
}

TEST(PlansBesideTheGraph, TheDefaultPlanAndTheSearchsLieNextToTheGraph) {
  EXPECT_EQ(beside_graph("/tmp/model.graph.json", "plan.json"), "/tmp/model.graph.plan.json");
  EXPECT_EQ(beside_graph("g.json", "plan.json"), "g.plan.json");
  EXPECT_EQ(auto_path("/tmp/model.graph.json", "plan.json"), "/tmp/model.graph.auto-plan.json");
}

}  // namespace
}  // namespace flexpipe
