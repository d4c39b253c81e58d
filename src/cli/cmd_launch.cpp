// flexpipe launch: run K ranks of a command on this machine with torchrun's environment
// (`torchrun --nproc-per-node K` without torch), on one node or as node R of N (static rendezvous). The process logic
// is behind launcher.h; this file only turns the command line into validated LaunchOptions.
#include <fmt/format.h>

#include "flexpipe/launch/launcher.h"
#include "flexpipe/support/error.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

constexpr double kMaxGraceSeconds = 24 * 3600;

constexpr const char* kFooter = R"(Put the command after --, so that its own options are not read as launch's:
  flexpipe launch -n 2 -- python train.py --epochs 1
Several machines: one launcher per node, each with the same --nnodes, --master-addr and --master-port:
  flexpipe launch --nnodes 2 --node-rank 0 -n 4 --master-addr node01 --master-port 29500 -- flexpipe train ...
  flexpipe launch --nnodes 2 --node-rank 1 -n 4 --master-addr node01 --master-port 29500 -- flexpipe train ...

Local rank i of node R (K ranks per node, N nodes) runs with RANK=R*K+i, WORLD_SIZE=N*K, LOCAL_RANK=i,
LOCAL_WORLD_SIZE=K, GROUP_RANK=R, GROUP_WORLD_SIZE=N, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME=default,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT=0, TORCHELASTIC_MAX_RESTARTS=0,
TORCHELASTIC_RUN_ID=none, TORCHELASTIC_USE_AGENT_STORE=False (rank 0 hosts the store); and, when
K > 1, OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1 unless already set.
Each rank runs in its own process group and writes straight to the launcher's stdout and stderr
(through the launcher with --tag-output). SIGINT, SIGTERM and SIGHUP are forwarded to every rank.

When a rank exits non-zero or is killed by a signal (or a signal is forwarded), the other ranks get
--grace seconds to exit on their own, then SIGTERM, then SIGKILL 3 s later. Every rank is reaped.

Exit code: 0 when every rank exits 0; else that of the first rank that failed (128+S when killed
by signal S; 127 when the command is not found, 126 when it cannot be executed); 128+S when signal
S interrupted the launcher and every rank still exited 0; 1 when a rank could not be started
(fork or pipe failed); 2 bad options. See docs/launch.md.)";

void check(const LaunchOptions& o, bool ranks_given, bool port_given, bool addr_given) {
  if (!ranks_given) throw Error(fmt::format("launch needs -n N, the number of ranks to start (1..{})", kMaxRanks));
  if (o.nodes < 1 || o.nodes > kMaxNodes)
    throw Error(fmt::format("--nnodes {}: the number of nodes must be between 1 and {}", o.nodes, kMaxNodes));
  if (o.node_rank < 0 || o.node_rank >= o.nodes)
    throw Error(
        fmt::format("--node-rank {}: must be between 0 and {} (--nnodes {})", o.node_rank, o.nodes - 1, o.nodes));
  // Each node's launcher picks nothing on its own: a free port or a default address found on one
  // node would not be the one the others use, and their ranks would wait for a store that is not there.
  if (o.nodes > 1 && (!addr_given || !port_given))
    throw Error(
        fmt::format("--nnodes {}: every node's launcher needs the same --master-addr (node 0's address) and "
                    "--master-port",
                    o.nodes));
  if (o.ranks < 1 || o.ranks > kMaxRanks)
    throw Error(fmt::format("-n {}: the number of ranks must be between 1 and {}", o.ranks, kMaxRanks));
  if (o.command.empty())
    throw Error("launch needs a command to run: flexpipe launch -n N [OPTIONS] -- COMMAND [ARGS...]");
  if (port_given && (o.master_port < 1 || o.master_port > 65535))
    throw Error(fmt::format("--master-port {}: must be between 1 and 65535", o.master_port));
  if (o.master_addr.empty()) throw Error("--master-addr must not be empty");
  if (!(o.grace_seconds >= 0 && o.grace_seconds <= kMaxGraceSeconds))
    throw Error(fmt::format("--grace {}: must be between 0 and {} seconds", o.grace_seconds, kMaxGraceSeconds));
}

}  // namespace

void add_launch_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand("launch",
                                     "Run K ranks of a command on this machine with torchrun's environment "
                                     "(like torchrun --nproc-per-node K), alone or as one node of several");
  auto o = std::make_shared<LaunchOptions>();
  auto* ranks = command->add_option("-n,--nproc-per-node", o->ranks,
                                    fmt::format("Number of ranks to start on this node, 1..{} (required)", kMaxRanks));
  command->add_option("--nnodes", o->nodes, "Number of nodes, each with its own launcher [1]");
  command->add_option("--node-rank", o->node_rank, "Which node this launcher starts, 0..nnodes-1 [0]");
  auto* addr = command
                   ->add_option("--master-addr", o->master_addr,
                                "MASTER_ADDR given to every rank: where rank 0 hosts the store (node 0's address)")
                   ->capture_default_str();
  auto* port =
      command->add_option("--master-port", o->master_port,
                          "MASTER_PORT given to every rank, 1..65535 (default on one node: a free port on 127.0.0.1)");
  add_quantity_option(command, "--grace", o->grace_seconds, QuantityKind::Time, QuantityRange::NonNegative,
                      kSecondsExamples,
                      fmt::format("How long the other ranks get to exit on their own after one fails, before SIGTERM: "
                                  "10s, 1min or seconds [{:g}s]",
                                  o->grace_seconds));
  command->add_flag("--tag-output", o->tag_output,
                    "Prefix every line the ranks print with '[rank i] ' (stdout and stderr each go through a pipe)");
  command->add_option("command", o->command, "The command to run and its arguments, after --");
  command->footer(kFooter);
  command->callback([o, ranks, port, addr, &exit_code] {
    check(*o, ranks->count() > 0, port->count() > 0, addr->count() > 0);
    exit_code = launch(*o);
  });
}

}  // namespace flexpipe::cli
