// Slurm's compressed host lists (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE). Torch-free, and without
// calling `scontrol show hostnames`, which a rank on a compute node may not have on its PATH.
#pragma once
#include <string>
#include <vector>

namespace flexpipe::runtime {

// "node[01-03,07],gpu5" -> node01 node02 node03 node07 gpu5. Zero padding is kept as written
// ("[08-10]" -> 08 09 10). Throws Error naming `variable` and the text when it is malformed.
std::vector<std::string> expand_slurm_nodelist(const std::string& text, const std::string& variable);

// "2(x3),1" -> 2 2 2 1: tasks on each node of the step, in node order. Throws Error naming `variable`.
std::vector<int> expand_slurm_tasks_per_node(const std::string& text, const std::string& variable);

}  // namespace flexpipe::runtime
