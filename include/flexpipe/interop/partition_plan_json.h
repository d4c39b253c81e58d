// The partition plan's file format (docs/partition-plan.md: "format": "flexpipe-partition-plan").
#pragma once
#include <string>

#include "flexpipe/partition/plan.h"

namespace flexpipe {

std::string partition_plan_to_json(const PartitionPlan& plan);
// Errors name the file and, for syntax errors, line and column, else the JSON path.
PartitionPlan parse_partition_plan(const std::string& text, const std::string& origin);
PartitionPlan load_partition_plan(const std::string& path);

}  // namespace flexpipe
