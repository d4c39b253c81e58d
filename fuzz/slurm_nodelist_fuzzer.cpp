// libFuzzer target for Slurm's compressed lists (SLURM_JOB_NODELIST, SLURM_TASKS_PER_NODE), which every
// rank of a Slurm job reads from its environment: each input is expanded or refused with one Error,
// and never expands past the reader's bound on hosts.
#include "flexpipe/train/slurm_nodelist.h"
#include "fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = flexpipe::fuzz::input_text(data, size);
  flexpipe::fuzz::reads([&] {
    if (flexpipe::runtime::expand_slurm_nodelist(text, "SLURM_JOB_NODELIST").size() > 100000) std::abort();
  });
  flexpipe::fuzz::reads([&] {
    if (flexpipe::runtime::expand_slurm_tasks_per_node(text, "SLURM_TASKS_PER_NODE").size() > 100000) std::abort();
  });
  return 0;
}
