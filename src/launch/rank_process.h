// One rank of flexpipe launch: what the supervisor knows of its process, and how that process is started.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "flexpipe/launch/launcher.h"
#include "output_relay.h"
#include "signal_relay.h"

namespace flexpipe::launcher {

struct Rank {
  int index = 0;  // the global rank: node_rank * ranks per node + local rank
  pid_t pid = -1;
  bool running = false;  // started and not yet reaped
  // Its process group may still hold what it started, and the launcher is to end that: from the
  // start until the group is found empty, except for a rank that finished normally (exit 0 before
  // any failure), whose leftovers are its own business, as if it had been run directly.
  bool group_tracked = false;
  int exit_code = 0;                 // once reaped: the code, or 128 + signal
  int exec_errno = 0;                // the command could not be executed (reported when it happened)
  std::vector<TaggedStream> output;  // stdout and stderr pipes under --tag-output
};

enum class Started { kYes, kNotExecuted, kNotStarted };

// Starts one rank. Reports here when it cannot (kNotStarted: no child) or when its command cannot be
// executed (kNotExecuted: the child exits 127 or 126 and is reaped as usual). `base`: the launcher's
// environment, which the rank's is made from.
Started spawn_rank(Rank& rank, const LaunchOptions& options, int master_port, const std::vector<std::string>& base,
                   const SignalRelay& relay);

}  // namespace flexpipe::launcher
