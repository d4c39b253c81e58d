#pragma once
// flexpipe launch's process logic, torch-free and plain POSIX: start N ranks of one command on this
// machine with torchrun's environment, relay the launcher's signals to them, and end them together
// when one fails, so that a dead peer never leaves the others hanging in a collective.
#include <string>
#include <vector>

namespace flexpipe::cli {

struct LaunchOptions {
  int ranks = 0;                     // 1..kMaxRanks
  std::vector<std::string> command;  // program and arguments; a program without '/' is looked up in PATH
  std::string master_addr = "127.0.0.1";
  int master_port = 0;       // 0: free_tcp_port() picks one
  double grace_seconds = 5;  // after the first failure, before SIGTERM
  bool tag_output = false;   // prefix each line the ranks print with "[rank i] "
};

inline constexpr int kMaxRanks = 1024;
// How long ranks get after SIGTERM before SIGKILL.
inline constexpr double kTermToKillSeconds = 3;

// A TCP port that is free now: the one the kernel hands out for port 0 on 127.0.0.1. Another process
// may take it before rank 0 binds it (torchrun has the same window). Throws Error when no socket can be had.
int free_tcp_port();

// The environment of one rank: `base` (NAME=VALUE entries, like environ) with RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT replaced, and, when several ranks share the
// machine, OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 added unless `base` sets them.
std::vector<std::string> rank_environment(const std::vector<std::string>& base, int rank, int world_size,
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

}  // namespace flexpipe::cli
