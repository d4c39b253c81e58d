// Reads the launcher's variables, torchrun's or Slurm's. Torch-free on purpose: the CLI calls it
// before it decides whether to load the runtime library at all.
#include "flexpipe/train/rank_env.h"

#include <charconv>
#include <cstdlib>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/train/slurm_nodelist.h"

namespace flexpipe::runtime {

namespace {

std::optional<std::string> variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// Strict: the whole value must be a decimal integer in [low, high]. A stray "4 " or "4x" is more
// likely a launcher bug than something to guess about.
std::optional<int> integer_variable(const char* name, int low, int high) {
  const std::optional<std::string> text = variable(name);
  if (!text) return std::nullopt;
  int value = 0;
  const char* end = text->data() + text->size();
  const auto [stop, status] = std::from_chars(text->data(), end, value);
  if (text->empty() || status != std::errc() || stop != end)
    throw Error(fmt::format("environment variable {}='{}' is not an integer", name, *text));
  if (value < low || value > high)
    throw Error(fmt::format("environment variable {}={} is out of range ({}..{})", name, value, low, high));
  return value;
}

int required_integer(const char* name, int low, int high, int world_size) {
  const std::optional<int> value = integer_variable(name, low, high);
  if (!value)
    throw Error(fmt::format("environment variable {} is missing (required when WORLD_SIZE={})", name, world_size));
  return *value;
}

// torchrun's variables, which flexpipe launch sets too.
RankEnv torchrun_env() {
  constexpr int kMaxInt = 1 << 30;
  RankEnv env;
  env.launcher = "torchrun";
  const std::optional<int> world_size = integer_variable("WORLD_SIZE", 1, kMaxInt);
  if (world_size) env.world_size = *world_size;

  // A multi-rank job without RANK or MASTER_PORT would have every process guess the same identity
  // or port, and the rendezvous would hang instead of failing, so both are required there.
  const bool multi_rank = env.world_size > 1;
  const int last_rank = env.world_size - 1;
  if (multi_rank) {
    env.rank = required_integer("RANK", 0, last_rank, env.world_size);
    env.master_port = required_integer("MASTER_PORT", 1, 65535, env.world_size);
  } else {
    env.rank = integer_variable("RANK", 0, last_rank).value_or(0);
    env.master_port = integer_variable("MASTER_PORT", 1, 65535).value_or(env.master_port);
  }

  if (const std::optional<std::string> addr = variable("MASTER_ADDR")) {
    if (addr->empty()) throw Error("environment variable MASTER_ADDR is empty");
    env.master_addr = *addr;
  }

  env.local_world_size = integer_variable("LOCAL_WORLD_SIZE", 1, env.world_size).value_or(env.world_size);
  env.local_rank = integer_variable("LOCAL_RANK", 0, env.local_world_size - 1).value_or(env.rank);
  if (env.local_rank >= env.local_world_size)
    throw Error(
        fmt::format("LOCAL_RANK defaults to RANK={}, which is out of range for LOCAL_WORLD_SIZE={}; "
                    "set LOCAL_RANK",
                    env.rank, env.local_world_size));
  env.node_rank = integer_variable("GROUP_RANK", 0, kMaxInt).value_or(0);
  // torchrun writes Python's str(True); anything else (unset, False) means rank 0 hosts the store.
  if (const std::optional<std::string> agent = variable("TORCHELASTIC_USE_AGENT_STORE")) {
    if (*agent != "True" && *agent != "False")
      throw Error(
          fmt::format("environment variable TORCHELASTIC_USE_AGENT_STORE='{}' is neither True nor False", *agent));
    env.agent_store = *agent == "True";
  }
  return env;
}

// srun's variables. Slurm has no master address or port of its own: MASTER_ADDR and MASTER_PORT
// win when set (a batch script may export them), else every rank derives the same pair from the
// job: its first node, and a port from its id.
RankEnv slurm_env() {
  constexpr int kMaxInt = 1 << 30;
  RankEnv env;
  env.launcher = "slurm";
  env.world_size = *integer_variable("SLURM_NTASKS", 1, kMaxInt);
  const int last_rank = env.world_size - 1;
  env.rank = *integer_variable("SLURM_PROCID", 0, last_rank);
  env.node_rank = integer_variable("SLURM_NODEID", 0, kMaxInt).value_or(0);
  env.local_rank = integer_variable("SLURM_LOCALID", 0, last_rank).value_or(env.world_size == 1 ? 0 : -1);
  if (env.local_rank < 0)
    throw Error(
        fmt::format("environment variable SLURM_LOCALID is missing (required when SLURM_NTASKS={})", env.world_size));
  // SLURM_STEP_TASKS_PER_NODE ("2(x3),1") says how many ranks share each node of this srun step.
  env.local_world_size = env.world_size;
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const std::optional<std::string> text = variable(name);
    if (!text) continue;
    const std::vector<int> counts = expand_slurm_tasks_per_node(*text, name);
    if (env.node_rank >= static_cast<int>(counts.size()))
      throw Error(fmt::format("environment variable {}='{}' lists {} nodes, but SLURM_NODEID is {}", name, *text,
                              counts.size(), env.node_rank));
    env.local_world_size = counts[static_cast<size_t>(env.node_rank)];
    break;
  }
  if (env.local_rank >= env.local_world_size)
    throw Error(fmt::format("environment variable SLURM_LOCALID={} is out of range for the {} tasks of node {}",
                            env.local_rank, env.local_world_size, env.node_rank));

  if (const std::optional<std::string> addr = variable("MASTER_ADDR")) {
    if (addr->empty()) throw Error("environment variable MASTER_ADDR is empty");
    env.master_addr = *addr;
  } else if (const std::optional<std::string> nodes = variable("SLURM_JOB_NODELIST")) {
    env.master_addr = expand_slurm_nodelist(*nodes, "SLURM_JOB_NODELIST").front();
  } else if (env.world_size > 1) {
    throw Error(
        fmt::format("neither MASTER_ADDR nor SLURM_JOB_NODELIST is set (one is required when SLURM_NTASKS={}): "
                    "the ranks cannot know where rank 0 is",
                    env.world_size));
  }
  if (const std::optional<int> port = integer_variable("MASTER_PORT", 1, 65535)) {
    env.master_port = *port;
  } else if (const std::optional<int> job = integer_variable("SLURM_JOB_ID", 0, kMaxInt)) {
    env.master_port = 20000 + *job % 10000;
  } else if (env.world_size > 1) {
    throw Error(fmt::format("neither MASTER_PORT nor SLURM_JOB_ID is set (one is required when SLURM_NTASKS={})",
                            env.world_size));
  }
  return env;
}

}  // namespace

bool in_launched_job() {
  // One Slurm task (an interactive `srun --pty bash`, a one-task step) is a machine to launch ranks on
  // like any other, not a job of one rank.
  const std::optional<std::string> tasks = variable("SLURM_NTASKS");
  return variable("WORLD_SIZE") || (variable("SLURM_PROCID") && tasks && *tasks != "1");
}

RankEnv rank_env_from_environment() {
  if (variable("WORLD_SIZE")) return torchrun_env();
  if (in_launched_job()) return slurm_env();
  RankEnv env = torchrun_env();  // no launcher: a single rank, MASTER_PORT and the like still read
  env.launcher = "none";
  return env;
}

}  // namespace flexpipe::runtime
