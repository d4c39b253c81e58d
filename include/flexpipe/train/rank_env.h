#pragma once
// Who this process is in a job, read from the variables torchrun sets (and `flexpipe launch` too):
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Torch-free.
#include <string>

namespace flexpipe::runtime {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// Throws Error naming the variable that is missing or malformed (RANK, WORLD_SIZE, MASTER_PORT are
// required when WORLD_SIZE > 1; LOCAL_* default to RANK/WORLD_SIZE; MASTER_ADDR to 127.0.0.1).
// With no WORLD_SIZE at all, a single-rank job.
RankEnv rank_env_from_environment();

}  // namespace flexpipe::runtime
