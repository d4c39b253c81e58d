// Who this process is in a job, read from the variables of the launcher that started it: torchrun's
// (and `flexpipe launch`'s) RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE; or, when WORLD_SIZE is unset, Slurm's (srun's)
// SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE and
// SLURM_JOB_NODELIST. Torch-free.
#pragma once
#include <string>

namespace flexpipe::runtime {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;  // which node (machine) of the job this rank runs on: GROUP_RANK or SLURM_NODEID
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun's agent already serves c10d's TCPStore on MASTER_ADDR:MASTER_PORT
  // (TORCHELASTIC_USE_AGENT_STORE=True): every rank, rank 0 included, connects to it as a client.
  bool agent_store = false;
  std::string launcher = "none";  // "torchrun" (torchrun's variables, also flexpipe launch's), "slurm" or "none"
};

// Whether this process is a rank of a job some launcher started (WORLD_SIZE is set, or srun's
// SLURM_PROCID and SLURM_NTASKS other than 1), rather than a command that is to launch its own ranks.
bool in_launched_job();

// Throws Error naming the variable that is missing or malformed (RANK, WORLD_SIZE, MASTER_PORT are
// required when WORLD_SIZE > 1; LOCAL_* default to RANK/WORLD_SIZE; MASTER_ADDR to 127.0.0.1).
// Under Slurm: MASTER_ADDR defaults to the first host of SLURM_JOB_NODELIST and MASTER_PORT to
// 20000 + SLURM_JOB_ID % 10000, the same on every rank of the job. With no job at all, a single rank.
RankEnv rank_env_from_environment();

}  // namespace flexpipe::runtime
