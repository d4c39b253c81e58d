// What an export (flexpipe export) was made from: the captured graph, the plan, the dtype, the model's
// source file and the Python package that cut it. `flexpipe train --model` cuts the model again only
// when one of them changed: tracing and saving the modules costs seconds on every run otherwise.
#pragma once
#include <string>

#include "flexpipe/costs/cost_graph.h"

namespace flexpipe {

// A checksum of those inputs, or "" when one cannot be read (then the export is always made again).
std::string export_stamp(const std::string& graph_path, const CostGraph& graph, const std::string& plan_path,
                         const std::string& dtype);

// Whether `export_dir` holds a complete export made from inputs with this stamp.
bool export_is_current(const std::string& export_dir, const std::string& stamp);

// Before an export into `export_dir`: forgets the stamp, so that a failed export is not taken as made.
void forget_export_stamp(const std::string& export_dir);
// After it succeeded.
void write_export_stamp(const std::string& export_dir, const std::string& stamp);

}  // namespace flexpipe
