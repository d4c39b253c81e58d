// One machine behaving like several: two `flexpipe launch --nnodes 2` launchers on loopback (and, as
// root, in two network namespaces joined by a virtual Ethernet pair), the real
// torchrun (the Python environment's) as the launcher, a Slurm-like environment set here, and a node's
// launcher killed mid-step. Each trains the small model for 2 steps and compares its losses with
// `flexpipe train` launching the same world size itself; a free port each; every process runs under
// `timeout`, which ends its whole process group should something hang.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../cli/cli_harness.h"

extern char** environ;

namespace flexpipe::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const std::string kBinary = FLEXPIPE_BINARY;
const std::string kSmall =
    "--layers 2 --hidden 32 --heads 4 --seq-len 16 --microbatch-size 2 -p 2 --steps 2 --warmup 1";
constexpr auto kHang = 90s;  // "it did not hang": far above what any test needs

// Whether `port` on 127.0.0.1 can be bound now (0: any; returns the port bound, or 0).
int bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t length = sizeof address;
  int bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
    bound = ntohs(address.sin_port);
  ::close(fd);
  return bound;
}

std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> result;
  std::istringstream in(text);
  for (std::string word; in >> word;) result.push_back(word);
  return result;
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

class MultiNode : public CliHarness {
 protected:
  MultiNode() : CliHarness("flexpipe_multinode_") {}

  void TearDown() override {
    for (const pid_t pid : started_) ::kill(pid, SIGKILL);
    for (const pid_t pid : started_) ::waitpid(pid, nullptr, 0);
    CliHarness::TearDown();
  }

  // Starts `command` (split at spaces) with the test's environment plus `extra` and a token that
  // marks every process of this test, its output in NAME.out and NAME.err. Under `timeout` unless
  // `bare`: the test kills a bare one itself.
  pid_t start(const std::string& name, const std::string& command, std::vector<std::string> extra = {},
              bool bare = false) {
    std::vector<std::string> argv = bare ? std::vector<std::string>{} : words("timeout -k 5 60");
    for (std::string& word : words(command)) argv.push_back(std::move(word));
    std::vector<std::string> env;
    for (char** entry = environ; *entry; ++entry) env.emplace_back(*entry);
    env.insert(env.end(), extra.begin(), extra.end());
    env.push_back("OMP_NUM_THREADS=1");
    env.push_back("FLEXPIPE_MULTINODE_TEST=" + dir_.string());
    std::vector<char*> args, envp;
    for (std::string& a : argv) args.push_back(a.data());
    for (std::string& e : env) envp.push_back(e.data());
    args.push_back(nullptr);
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, (dir_ / (name + ".out")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, (dir_ / (name + ".err")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    EXPECT_EQ(posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), envp.data()), 0) << command;
    posix_spawn_file_actions_destroy(&actions);
    started_.push_back(pid);
    return pid;
  }

  // The exit code (128 + S for a signal), or -1 when it did not end in time (then it is killed).
  int finish(pid_t pid) {
    for (const auto start = Clock::now(); Clock::now() - start < kHang; std::this_thread::sleep_for(20ms)) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        std::erase(started_, pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    return -1;
  }

  std::string out(const std::string& name) { return slurp(dir_ / (name + ".out")); }
  std::string err(const std::string& name) { return slurp(dir_ / (name + ".err")); }

  static std::vector<double> losses_in(const std::string& json_text) {
    std::vector<double> result;
    const nlohmann::json report = nlohmann::json::parse(json_text, nullptr, false);
    if (report.is_discarded()) return result;
    for (const auto& step : report["runs"][0]["steps"]) result.push_back(step["loss"].get<double>());
    return result;
  }

  // `flexpipe train` launching its own 2 ranks: what every other way of starting the same job must reproduce.
  std::vector<double> reference_losses() {
    const Outcome run = flexpipe("train " + kSmall + " --json");
    EXPECT_EQ(run.exit_code, 0) << run.err;
    const std::vector<double> losses = losses_in(run.out);
    EXPECT_EQ(losses.size(), 2u) << run.out;
    return losses;
  }

  // The processes of this test still alive (their environment carries the test's token).
  std::vector<pid_t> leftovers() {
    std::vector<pid_t> alive;
    const std::string token = "FLEXPIPE_MULTINODE_TEST=" + dir_.string();
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string name = entry.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const std::string environment = slurp(entry.path() / "environ");
      if (environment.find(token + '\0') == std::string::npos) continue;
      const std::string stat = slurp(entry.path() / "stat");
      const size_t paren = stat.rfind(')');
      if (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z') continue;
      alive.push_back(std::stoi(name));
    }
    return alive;
  }

 private:
  std::vector<pid_t> started_;
};

TEST_F(MultiNode, TwoLaunchersTrainLikeOne) {
  const std::vector<double> expected = reference_losses();
  const std::string port = std::to_string(bindable(0));
  const std::string launch =
      kBinary + " launch --nnodes 2 -n 1 --master-addr 127.0.0.1 --master-port " + port + " --grace 1 --node-rank ";
  const std::string train = " -- " + kBinary + " train " + kSmall + " --json";
  const pid_t node0 = start("node0", launch + "0" + train);
  const pid_t node1 = start("node1", launch + "1" + train);
  ASSERT_EQ(finish(node0), 0) << err("node0");
  ASSERT_EQ(finish(node1), 0) << err("node1");
  EXPECT_EQ(losses_in(out("node0")), expected) << out("node0");
  EXPECT_EQ(out("node1"), "");  // rank 0 reports, and it runs on node 0
  // Each node's first line says which interface its ranks use: loopback, for a loopback master.
  for (const int node : {0, 1})
    EXPECT_EQ(err("node" + std::to_string(node)),
              fmt::format("node {} ({}): Gloo uses interface lo (127.0.0.1), chosen by the route to MASTER_ADDR "
                          "127.0.0.1\n",
                          node, host_name()));
}

// Two machines as near as one gets on one: two network namespaces (root only; skipped elsewhere), each
// with its own address on a virtual Ethernet pair, a launcher in each. Node 1 reaches node 0 only
// through that link, and both pick the pair's interface as the route to MASTER_ADDR.
TEST_F(MultiNode, TwoNodesInTheirOwnNetworkNamespaces) {
  if (::geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  const std::string name = "fpmn" + std::to_string(::getpid());
  const std::string setup = fmt::format(
      "ip netns add {0}a && ip netns add {0}b && ip link add {0}x type veth peer name {0}y && "
      "ip link set {0}x netns {0}a && ip link set {0}y netns {0}b && "
      "ip -n {0}a addr add 10.77.0.1/24 dev {0}x && ip -n {0}b addr add 10.77.0.2/24 dev {0}y && "
      "ip -n {0}a link set {0}x up && ip -n {0}b link set {0}y up && "
      "ip -n {0}a link set lo up && ip -n {0}b link set lo up",
      name);
  const bool made = std::system(("(" + setup + ") >/dev/null 2>&1").c_str()) == 0;
  // Deleting a namespace deletes its end of the pair, and with it the other end.
  struct Cleanup {
    std::string name;
    ~Cleanup() {
      [[maybe_unused]] int ignored =
          std::system(("ip netns del " + name + "a 2>/dev/null; ip netns del " + name + "b 2>/dev/null").c_str());
    }
  } cleanup{name};
  if (!made) GTEST_SKIP() << "cannot make network namespaces here";
  const std::vector<double> expected = reference_losses();
  const std::string train = " -- " + kBinary + " train " + kSmall + " --json";
  const std::string launch = kBinary + " launch --nnodes 2 -n 1 --master-addr 10.77.0.1 --master-port 29500 --grace 1";
  const pid_t node0 = start("node0", "ip netns exec " + name + "a " + launch + " --node-rank 0" + train);
  const pid_t node1 = start("node1", "ip netns exec " + name + "b " + launch + " --node-rank 1" + train);
  ASSERT_EQ(finish(node0), 0) << err("node0");
  ASSERT_EQ(finish(node1), 0) << err("node1");
  EXPECT_EQ(losses_in(out("node0")), expected) << out("node0");
  EXPECT_EQ(err("node0"), fmt::format("node 0 ({}): Gloo uses interface {}x (10.77.0.1), chosen by the route to "
                                      "MASTER_ADDR 10.77.0.1\n",
                                      host_name(), name));
  EXPECT_EQ(err("node1"), fmt::format("node 1 ({}): Gloo uses interface {}y (10.77.0.2), chosen by the route to "
                                      "MASTER_ADDR 10.77.0.1\n",
                                      host_name(), name));
}

// GLOO_SOCKET_IFNAME chooses the interface as it does for PyTorch, and says so in the first line; a
// name the machine does not have is one error naming the variable, from every rank, before any rendezvous.
TEST_F(MultiNode, GlooSocketIfnameChoosesTheInterface) {
  const std::string train = kBinary + " launch -n 2 --grace 1 -- " + kBinary + " train " + kSmall;
  const pid_t chosen = start("chosen", train, {"GLOO_SOCKET_IFNAME=lo"});
  ASSERT_EQ(finish(chosen), 0) << err("chosen");
  EXPECT_EQ(err("chosen"),
            fmt::format("node 0 ({}): Gloo uses interface lo (127.0.0.1), chosen by GLOO_SOCKET_IFNAME\n",
                        host_name()));
  const pid_t wrong = start("wrong", train, {"GLOO_SOCKET_IFNAME=nosuch0"});
  EXPECT_EQ(finish(wrong), 2) << err("wrong");
  EXPECT_NE(err("wrong").find("error: rank 0: environment variable GLOO_SOCKET_IFNAME=nosuch0: this machine has no "
                              "interface of that name with an address (it has: lo"),
            std::string::npos)
      << err("wrong");
}

// torchrun's agent hosts the store on MASTER_PORT itself (TORCHELASTIC_USE_AGENT_STORE=True): the ranks
// must connect to it, rank 0 included. The torchrun is the project environment's (tests/CMakeLists.txt);
// with --redirects and --tee rank 0's stdout is in the log directory.
TEST_F(MultiNode, TheRealTorchrunDrivesTrain) {
  const std::vector<double> expected = reference_losses();
  const std::string port = std::to_string(bindable(0));
  const pid_t torchrun =
      start("torchrun", std::string(FLEXPIPE_TORCHRUN) +
                            " --nnodes 1 --nproc_per_node 2 "
                            "--master_addr 127.0.0.1 --master_port " +
                            port + " --monitor_interval 0.1 --redirects 1 --tee 1 --log_dir " +
                            (dir_ / "logs").string() + " --no_python " + kBinary + " train " + kSmall + " --json");
  ASSERT_EQ(finish(torchrun), 0) << err("torchrun");
  std::string rank0;
  for (const auto& entry : fs::recursive_directory_iterator(dir_ / "logs"))
    if (entry.path().filename() == "stdout.log" && entry.path().parent_path().filename() == "0")
      rank0 = slurp(entry.path());
  EXPECT_EQ(losses_in(rank0), expected) << rank0 << err("torchrun");
}

// What srun sets for two tasks on two nodes, no WORLD_SIZE; the master is the first host of the
// compressed node list, the port derived from the job id (20000 + id % 10000).
TEST_F(MultiNode, SlurmVariablesAreEnoughForTrain) {
  const std::vector<double> expected = reference_losses();
  std::mt19937 random(static_cast<unsigned>(::getpid()));
  int port = 0;
  while (port == 0) port = bindable(20000 + static_cast<int>(random() % 10000));
  std::vector<pid_t> tasks;
  for (const int task : {0, 1})
    tasks.push_back(
        start("task" + std::to_string(task), kBinary + " train " + kSmall + " --json",
              {"SLURM_PROCID=" + std::to_string(task), "SLURM_NTASKS=2", "SLURM_LOCALID=0",
               "SLURM_NODEID=" + std::to_string(task), "SLURM_STEP_TASKS_PER_NODE=1(x2)",
               "SLURM_JOB_NODELIST=127.0.0.[1-2]", "SLURM_JOB_ID=" + std::to_string(port - 20000 + 50000)}));
  ASSERT_EQ(finish(tasks[0]), 0) << err("task0");
  ASSERT_EQ(finish(tasks[1]), 0) << err("task1");
  EXPECT_EQ(losses_in(out("task0")), expected) << out("task0");
}

// Node 1's launcher dies (SIGKILL: no chance to clean up) while the ranks train: its rank dies with it,
// node 0's rank fails with a message naming the rank and node it lost, and nothing is left behind.
TEST_F(MultiNode, ANodesLauncherKilledMidStepEndsTheJobNamingIt) {
  const std::string port = std::to_string(bindable(0));
  const std::string launch =
      kBinary + " launch --nnodes 2 -n 1 --master-addr 127.0.0.1 --master-port " + port + " --grace 1 --node-rank ";
  const std::string train = " -- " + kBinary +
                            " train --layers 2 --hidden 32 --heads 4 --seq-len 16 "
                            "--microbatch-size 2 -p 2 --steps 100000 --timeout 30";
  const pid_t node0 = start("node0", launch + "0" + train);
  const pid_t node1 = start("node1", launch + "1" + train, {}, /*bare=*/true);
  // Rank 0 prints a line per step: once the second is out, the job is mid-run.
  for (const auto start = Clock::now(); Clock::now() - start < kHang; std::this_thread::sleep_for(20ms))
    if (out("node0").find("step    2/100000") != std::string::npos) break;
  ASSERT_NE(out("node0").find("step    2/100000"), std::string::npos) << err("node0") << err("node1");
  ::kill(node1, SIGKILL);
  EXPECT_EQ(finish(node1), 128 + SIGKILL);
  EXPECT_EQ(finish(node0), 3) << err("node0");  // a peer failed (docs/runtime.md)
  const std::string message = err("node0");
  EXPECT_NE(message.find("error: rank 0: step "), std::string::npos) << message;
  EXPECT_NE(message.find("(rank 1 runs on node 1 (" + host_name() + "))"), std::string::npos) << message;
  EXPECT_NE(message.find("flexpipe launch: node 0: rank 0 (pid "), std::string::npos) << message;
  // Node 1's rank died with its launcher (the parent-death signal); nothing of the job runs on.
  std::vector<pid_t> left;
  for (const auto start = Clock::now(); Clock::now() - start < 10s; std::this_thread::sleep_for(50ms))
    if ((left = leftovers()).empty()) break;
  EXPECT_TRUE(left.empty()) << left.size() << " processes left, the first " << left[0];
}

}  // namespace
}  // namespace flexpipe::test
