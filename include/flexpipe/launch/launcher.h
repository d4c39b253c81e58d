// flexpipe launch's process logic, torch-free and plain POSIX: start this node's ranks of one command
// with torchrun's environment (one launcher per node, torchrun's static rendezvous: node R of N starts
// global ranks R*K .. R*K+K-1), relay the launcher's signals to them, and end them together when one
// fails, so that a dead peer never leaves the others hanging in a collective.
#pragma once
#include <string>
#include <vector>

namespace flexpipe {

struct LaunchOptions {
  int ranks = 0;                     // on this node (--nproc-per-node), 1..kMaxRanks
  int nodes = 1;                     // --nnodes, 1..kMaxNodes
  int node_rank = 0;                 // --node-rank, 0..nodes-1
  std::vector<std::string> command;  // program and arguments; a program without '/' is looked up in PATH
  std::string master_addr = "127.0.0.1";
  int master_port = 0;       // 0: free_tcp_port() picks one
  double grace_seconds = 5;  // after the first failure, before SIGTERM
  bool tag_output = false;   // prefix each line the ranks print with "[rank i] "
};

inline constexpr int kMaxRanks = 1024;
inline constexpr int kMaxNodes = 65536;
// How long ranks get after SIGTERM before SIGKILL.
inline constexpr double kTermToKillSeconds = 3;

// A TCP port that is free now: the one the kernel hands out for port 0 on 127.0.0.1. Another process
// may take it before rank 0 binds it (torchrun has the same window). Throws Error when no socket can be had.
int free_tcp_port();

// Where one rank sits in the job.
struct RankPlace {
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this node
  int node_rank = 0;
  int nodes = 1;
  int rank() const { return node_rank * local_world_size + local_rank; }
  int world_size() const { return nodes * local_world_size; }
};

// The environment of one rank: `base` (NAME=VALUE entries, like environ) with torchrun's variables
// replaced (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_*,
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*), and, when several ranks share the machine,
// OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 added unless `base` sets them.
std::vector<std::string> rank_environment(const std::vector<std::string>& base, const RankPlace& place,
                                          const std::string& master_addr, int master_port);

// How a child ended, from its wait status: "exited with code 3", "was killed by signal 9 (Killed)".
std::string describe_wait_status(int status);
// The shell's exit code for a wait status: the code, or 128 + the signal.
int exit_code_of(int status);

// Starts the ranks and supervises them until every one has been reaped. Returns the launcher's exit
// code: 0 when all ranks exit 0, else that of the first rank that failed (127 when the command cannot
// be found, 126 when it cannot be executed; 1 when a rank could not be started), else 128 + the signal
// that interrupted the launcher. Expects validated options (the CLI checks them); writes its own
// reports to stderr. Meant for a process of its own: it handles SIGCHLD, SIGINT, SIGTERM and SIGHUP
// while it runs and reaps every child of the process, not only the ranks.
int launch(const LaunchOptions& options);

}  // namespace flexpipe
