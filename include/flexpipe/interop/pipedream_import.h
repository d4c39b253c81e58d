// Imports a PipeDream profile (profiler/.../graph.txt, msr-fiddle/pipedream) as a cost graph.
// Node lines:  nodeN -- DESC -- forward_compute_time=MS, backward_compute_time=MS, activation_size=BYTES,
//              parameter_size=BYTES[ -- stage_id=K]
// Edge lines:  <TAB>nodeA -- nodeB
// Mapping and limits: docs/cost-graph.md, "Importing a PipeDream profile".
#pragma once
#include <string>

#include "flexpipe/costs/cost_graph.h"

namespace flexpipe {

struct PipeDreamImportOptions {
  double profiled_microbatch_size = 1;  // the batch the profile was taken with
  double parameter_bytes = 4;           // PipeDream profiles fp32 models
};

// Errors: "ORIGIN:LINE:COL: message", then the line and a caret under the column.
CostGraph parse_pipedream_graph(const std::string& text, const std::string& origin,
                                const PipeDreamImportOptions& options = {});
CostGraph load_pipedream_graph(const std::string& path, const PipeDreamImportOptions& options = {});

}  // namespace flexpipe
