// The plans train writes next to a captured model's graph: --schedule auto's choice, and the partition
// it makes itself when --plan is not given (what `flexpipe partition` makes by default for the run).
#pragma once
#include <string>

#include "flexpipe/partition/plan.h"
#include "flexpipe/workflow/partition_request.h"
#include "flexpipe/workflow/training_request.h"

namespace flexpipe {

// A file next to the captured graph: GRAPH.NAME, GRAPH being the graph's path without its .json.
std::string beside_graph(const std::string& captured_model, const std::string& name);
// Writes `plan` next to the captured graph as GRAPH.NAME (docs/partition-plan.md); returns its path.
std::string write_plan_beside_graph(const std::string& captured_model, const std::string& name,
                                    const PartitionPlan& plan);

// What `flexpipe partition --model GRAPH` does by default, for this run of a captured model: its
// schedule, devices, micro-batches and chunks, the graph's own micro-batch (the one its export takes),
// DawnPiper's method and the hardware profile's memory as the limit. Reads request.captured_graph.
PartitionRequest default_partition_request(const TrainRequest& request);

// train --model GRAPH without --plan: partitions the graph by default_partition_request, writes the plan
// as GRAPH.plan.json, says so in one line on stderr, and makes it the request's plan (and the launched
// ranks'). Before any rank starts. Throws Error inside a launched job, for a graph without operator
// times, and when the model does not fit the limit.
void partition_captured_model(TrainRequest& request);

}  // namespace flexpipe
