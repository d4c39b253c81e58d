// Drives `flexpipe launch` through the real binary: the environment every rank sees, exit codes, how
// a failed rank or a signal to the launcher ends the other ranks and what they started, --tag-output,
// and bad input. The ranks are small shell scripts; sleeps are short and --grace is 1 s, and the only
// time limits are generous bounds that catch a hang.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "cli_harness.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using flexpipe::test::Outcome;
using flexpipe::test::slurp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kHang = 30s;  // "it did not hang": far above what any test needs

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> sorted(std::vector<std::string> lines) {
  std::sort(lines.begin(), lines.end());
  return lines;
}

// Whether the process exists and is not a zombie (in a container whose init does not reap, a
// killed orphan stays a zombie; it is gone all the same).
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

// Killing is asynchronous: a process signalled a moment ago may take a moment to go.
bool gone_soon(pid_t pid) {
  for (const auto start = Clock::now(); Clock::now() - start < 10s; std::this_thread::sleep_for(20ms))
    if (!alive(pid)) return true;
  return false;
}

class Launch : public flexpipe::test::CliHarness {
 protected:
  Launch() : CliHarness("flexpipe_launch_") {}

  // Should a test fail half-way, the sleeps it started must not outlive it.
  void TearDown() override {
    for (const pid_t pid : recorded_)
      if (alive(pid) && slurp("/proc/" + std::to_string(pid) + "/cmdline").find("sleep") != std::string::npos)
        ::kill(pid, SIGKILL);
    CliHarness::TearDown();
  }

  // A rank script in the scratch directory, run as `sh FILE`; it starts in that directory.
  std::string script(const std::string& name, const std::string& body) {
    return "sh " + write(name, "cd " + dir_.string() + "\n" + body).string();
  }

  // A rank script (path) under which each rank writes "$$ $!" (itself and a `sleep 1000` it started,
  // in its process group) to pids.RANK, atomically, then waits. `prelude` runs first.
  fs::path sleeper(const std::string& prelude = "") {
    return write("sleeper.sh", "cd " + dir_.string() + "\n" + prelude +
                                   "sleep 1000 &\n"
                                   "echo $$ $! > pids.tmp.$RANK && mv pids.tmp.$RANK pids.$RANK\n"
                                   "wait\n");
  }

  // The pids a rank of sleeper() wrote, once it has written them.
  std::vector<pid_t> pids_of(int rank) {
    const fs::path file = dir_ / ("pids." + std::to_string(rank));
    for (const auto start = Clock::now(); !fs::exists(file) && Clock::now() - start < kHang;)
      std::this_thread::sleep_for(20ms);
    std::vector<pid_t> pids;
    std::istringstream in(slurp(file));
    for (pid_t pid; in >> pid;) pids.push_back(pid);
    recorded_.insert(recorded_.end(), pids.begin(), pids.end());
    EXPECT_EQ(pids.size(), 2u) << "rank " << rank << " wrote no pids";
    return pids;
  }

  // Starts the launcher without waiting for it, its output going to files in the scratch directory.
  pid_t start(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {FLEXPIPE_BINARY, "launch"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> pointers;
    for (std::string& arg : argv) pointers.push_back(arg.data());
    pointers.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, (dir_ / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, (dir_ / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    EXPECT_EQ(posix_spawn(&pid, FLEXPIPE_BINARY, &actions, nullptr, pointers.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    return pid;
  }

  // The launcher's wait status, or nothing (and it is killed) when it did not end in time.
  std::optional<int> wait_for(pid_t pid) {
    for (const auto start = Clock::now(); Clock::now() - start < kHang; std::this_thread::sleep_for(20ms)) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return std::nullopt;
  }

  std::string launcher_stderr() { return slurp(dir_ / "stderr"); }

 private:
  std::vector<pid_t> recorded_;  // every pid pids_of() returned
};

TEST_F(Launch, EveryRankSeesTheTorchrunEnvironment) {
  const fs::path seen = dir_ / "seen";
  const std::string command =
      script("env.sh",
             "echo $RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$MASTER_ADDR/$OMP_NUM_THREADS/"
             "$OPENBLAS_NUM_THREADS >> seen\necho $MASTER_PORT >> ports\n");
  // Stale values in the launcher's environment are replaced.
  ::setenv("RANK", "99", 1);
  const Outcome run = flexpipe("launch -n 4 -- " + command);
  ::unsetenv("RANK");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(sorted(lines_of(slurp(seen))),
            (std::vector<std::string>{"0/4/0/4/127.0.0.1/1/1", "1/4/1/4/127.0.0.1/1/1", "2/4/2/4/127.0.0.1/1/1",
                                      "3/4/3/4/127.0.0.1/1/1"}));
  // One port, picked by the launcher, the same for every rank.
  const std::vector<std::string> ports = lines_of(slurp(dir_ / "ports"));
  ASSERT_EQ(ports.size(), 4u);
  EXPECT_EQ(std::set<std::string>(ports.begin(), ports.end()).size(), 1u);
  const int port = std::stoi(ports[0]);
  EXPECT_GE(port, 1);
  EXPECT_LE(port, 65535);
  EXPECT_EQ(run.err, "");
}

TEST_F(Launch, MasterAddressPortAndThreadCountsCanBeGiven) {
  const std::string command = script("env.sh",
                                     "echo $RANK $MASTER_ADDR:$MASTER_PORT $OMP_NUM_THREADS "
                                     "$OPENBLAS_NUM_THREADS >> seen\n");
  ::setenv("OMP_NUM_THREADS", "7", 1);
  const Outcome run = flexpipe("launch -n 2 --master-addr 10.1.2.3 --master-port 29511 -- " + command);
  ::unsetenv("OMP_NUM_THREADS");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(sorted(lines_of(slurp(dir_ / "seen"))),
            (std::vector<std::string>{"0 10.1.2.3:29511 7 1", "1 10.1.2.3:29511 7 1"}));
}

// Node 1 of 3 with 2 ranks each starts global ranks 2 and 3, with every variable torchrun sets.
TEST_F(Launch, OneNodeOfSeveralStartsItsShareOfTheGlobalRanks) {
  const std::string command = script(
      "env.sh",
      "echo $RANK/$WORLD_SIZE/$LOCAL_RANK/$LOCAL_WORLD_SIZE/$GROUP_RANK/$GROUP_WORLD_SIZE/$ROLE_RANK/"
      "$ROLE_WORLD_SIZE/$ROLE_NAME/$MASTER_ADDR:$MASTER_PORT/$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS/"
      "$TORCHELASTIC_RUN_ID/$TORCHELASTIC_USE_AGENT_STORE >> seen\n");
  const Outcome run =
      flexpipe("launch --nnodes 3 --node-rank 1 -n 2 --master-addr 10.0.0.1 --master-port 29512 -- " + command);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(sorted(lines_of(slurp(dir_ / "seen"))),
            (std::vector<std::string>{"2/6/0/2/1/3/2/6/default/10.0.0.1:29512/0/0/none/False",
                                      "3/6/1/2/1/3/3/6/default/10.0.0.1:29512/0/0/none/False"}));
  // The launcher's own reports name its node, so that the logs of several nodes merged tell them apart.
  const Outcome failed = flexpipe(
      "launch --nnodes 2 --node-rank 1 -n 1 --master-addr 127.0.0.1 --master-port 29513 "
      "-- " +
      script("fail.sh", "exit 3\n"));
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_TRUE(failed.err.starts_with("flexpipe launch: node 1: rank 1 (pid ")) << failed.err;
}

TEST_F(Launch, OutputPassesThroughUntouched) {
  const Outcome run = flexpipe("launch -n 2 -- " + script("say.sh", "echo out $RANK\necho err $RANK >&2\n"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(sorted(lines_of(run.out)), (std::vector<std::string>{"out 0", "out 1"}));
  EXPECT_EQ(sorted(lines_of(run.err)), (std::vector<std::string>{"err 0", "err 1"}));
}

TEST_F(Launch, ExitCodeIsThatOfTheFirstRankToFail) {
  // Rank 1 fails at once; rank 0 fails later, with another code.
  const std::string command = script("fail.sh",
                                     "if [ $RANK = 1 ]; then touch failed; exit 3; fi\n"
                                     "while [ ! -e failed ]; do sleep 0.02; done\n"
                                     "sleep 0.5\nexit 5\n");
  const Outcome run = flexpipe("launch -n 2 --grace 5 -- " + command);
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_NE(run.err.find("flexpipe launch: rank 1 (pid "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(") exited with code 3\n"), std::string::npos) << run.err;
  // Only the first failure is reported, and rank 0 ended on its own within the grace period.
  EXPECT_EQ(run.err.find("code 5"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("SIGTERM"), std::string::npos) << run.err;
}

TEST_F(Launch, AFailedRankEndsASiblingAndWhatItStarted) {
  const std::string command = "sh " + sleeper(
                                          "if [ $RANK = 0 ]; then\n"
                                          "  while [ ! -e pids.1 ]; do sleep 0.02; done\n"
                                          "  exit 3\n"
                                          "fi\n")
                                          .string();
  const Outcome run = flexpipe("launch -n 2 --grace 1 -- " + command);
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_NE(run.err.find(") exited with code 3\n"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("flexpipe launch: sending SIGTERM to rank 1: still running 1 s after rank 0 failed"),
            std::string::npos)
      << run.err;
  // The sibling shell and the sleep it started (same process group) are both gone.
  for (const pid_t pid : pids_of(1)) EXPECT_TRUE(gone_soon(pid)) << pid;
}

TEST_F(Launch, ARankKilledBySignal9) {
  const std::string command = script("kill.sh", "if [ $RANK = 1 ]; then kill -9 $$; fi\nsleep 0.2\n");
  const Outcome run = flexpipe("launch -n 2 --grace 1 -- " + command);
  EXPECT_EQ(run.exit_code, 128 + 9) << run.err;
  EXPECT_NE(run.err.find(") was killed by signal 9 (Killed)\n"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("flexpipe launch: rank 1 (pid "), std::string::npos) << run.err;
}

TEST_F(Launch, ACommandThatCannotRunIs127Or126) {
  const Outcome missing = flexpipe("launch -n 3 -- flexpipe-no-such-command --flag");
  EXPECT_EQ(missing.exit_code, 127) << missing.err;
  // Reported once: the other ranks are not started.
  EXPECT_EQ(missing.err, "flexpipe launch: rank 0: cannot run 'flexpipe-no-such-command': No such file or directory\n");
  const fs::path not_executable = write("data.txt", "not a program\n");
  const Outcome denied = flexpipe("launch -n 1 -- " + not_executable.string());
  EXPECT_EQ(denied.exit_code, 126) << denied.err;
  EXPECT_NE(denied.err.find("cannot run '" + not_executable.string() + "': Permission denied"), std::string::npos)
      << denied.err;
}

TEST_F(Launch, TagOutputPrefixesEveryLineOfEveryRank) {
  const std::string command = script("tag.sh",
                                     "echo out$RANK\necho err$RANK >&2\necho second$RANK\n"
                                     "printf partial$RANK\n");
  const Outcome run = flexpipe("launch -n 2 --tag-output -- " + command);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(sorted(lines_of(run.out)),
            (std::vector<std::string>{"[rank 0] out0", "[rank 0] partial0", "[rank 0] second0", "[rank 1] out1",
                                      "[rank 1] partial1", "[rank 1] second1"}));
  EXPECT_EQ(sorted(lines_of(run.err)), (std::vector<std::string>{"[rank 0] err0", "[rank 1] err1"}));
  // A rank's lines keep their order.
  const std::string& out = run.out;
  EXPECT_LT(out.find("[rank 1] out1"), out.find("[rank 1] second1"));
}

TEST_F(Launch, TagOutputLosesNothing) {
  const Outcome run = flexpipe("launch -n 3 --tag-output -- " + script("seq.sh", "seq 1 20000\n"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::vector<int> next(3, 1);
  size_t count = 0;
  for (const std::string& line : lines_of(run.out)) {
    const int rank = line[6] - '0';
    ASSERT_EQ(line, "[rank " + std::to_string(rank) + "] " + std::to_string(next[rank])) << "after " << count;
    ++next[rank], ++count;
  }
  EXPECT_EQ(count, 60000u);
}

// Sends `sig` to a launcher of two sleeper() ranks once both are up; returns its wait status and the
// pids of the ranks and what they started.
struct Interrupted {
  std::optional<int> status;
  std::vector<pid_t> pids;
};

class LaunchSignals : public Launch {
 protected:
  Interrupted interrupt(int sig, const std::string& prelude = "") {
    const pid_t launcher = start({"-n", "2", "--grace", "1", "--", "sh", sleeper(prelude).string()});
    Interrupted result;
    for (int rank = 0; rank < 2; ++rank)
      for (const pid_t pid : pids_of(rank)) result.pids.push_back(pid);
    ::kill(launcher, sig);
    result.status = wait_for(launcher);
    return result;
  }
};

TEST_F(LaunchSignals, SigtermToTheLauncherEndsEveryRankAndWhatItStarted) {
  const Interrupted run = interrupt(SIGTERM);
  ASSERT_TRUE(run.status) << "the launcher hung: " << launcher_stderr();
  ASSERT_TRUE(WIFEXITED(*run.status));
  EXPECT_EQ(WEXITSTATUS(*run.status), 128 + SIGTERM) << launcher_stderr();
  EXPECT_NE(launcher_stderr().find("flexpipe launch: received SIGTERM; forwarding it to ranks 0-1\n"),
            std::string::npos)
      << launcher_stderr();
  ASSERT_EQ(run.pids.size(), 4u);
  for (const pid_t pid : run.pids) EXPECT_TRUE(gone_soon(pid)) << pid;
}

TEST_F(LaunchSignals, SigintReachesTheRanksAndWhatSurvivesItGetsSigterm) {
  // A background job of a non-interactive shell ignores SIGINT: the sleeps outlive their shells
  // until the grace period ends.
  const Interrupted run = interrupt(SIGINT);
  ASSERT_TRUE(run.status) << "the launcher hung: " << launcher_stderr();
  ASSERT_TRUE(WIFEXITED(*run.status));
  EXPECT_EQ(WEXITSTATUS(*run.status), 128 + SIGINT) << launcher_stderr();
  EXPECT_NE(launcher_stderr().find("was killed by signal 2 (Interrupt)"), std::string::npos) << launcher_stderr();
  EXPECT_NE(launcher_stderr().find("sending SIGTERM to ranks 0-1: still running 1 s after SIGINT"), std::string::npos)
      << launcher_stderr();
  for (const pid_t pid : run.pids) EXPECT_TRUE(gone_soon(pid)) << pid;
}

TEST_F(LaunchSignals, RanksThatIgnoreSigtermAreKilled) {
  const Interrupted run = interrupt(SIGTERM, "trap '' TERM\n");
  ASSERT_TRUE(run.status) << "the launcher hung: " << launcher_stderr();
  ASSERT_TRUE(WIFEXITED(*run.status));
  EXPECT_EQ(WEXITSTATUS(*run.status), 128 + SIGKILL) << launcher_stderr();
  EXPECT_NE(launcher_stderr().find("sending SIGKILL to ranks 0-1: still running 3 s after SIGTERM"), std::string::npos)
      << launcher_stderr();
  for (const pid_t pid : run.pids) EXPECT_TRUE(gone_soon(pid)) << pid;
}

TEST_F(LaunchSignals, AnInterruptedLaunchIsNotASuccessEvenWhenEveryRankExits0) {
  const Interrupted run = interrupt(SIGTERM, "trap 'exit 0' TERM\n");
  ASSERT_TRUE(run.status) << "the launcher hung: " << launcher_stderr();
  ASSERT_TRUE(WIFEXITED(*run.status));
  EXPECT_EQ(WEXITSTATUS(*run.status), 128 + SIGTERM) << launcher_stderr();
  for (const pid_t pid : run.pids) EXPECT_TRUE(gone_soon(pid)) << pid;
}

TEST_F(Launch, OneRankGetsNoThreadLimits) {
  // As with torchrun: the limits keep several ranks from oversubscribing the cores; one rank has them all.
  const char* saved = std::getenv("OMP_NUM_THREADS");
  const std::string restore = saved ? saved : "";
  ::unsetenv("OMP_NUM_THREADS");
  const Outcome run = flexpipe("launch -n 1 -- " + script("one.sh", "echo [$OMP_NUM_THREADS] > seen\n"));
  if (saved) ::setenv("OMP_NUM_THREADS", restore.c_str(), 1);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(slurp(dir_ / "seen"), "[]\n");
}

TEST_F(Launch, BadInputIsExitCode2WithOneMessage) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"launch -- true", "error: launch needs -n N, the number of ranks to start (1..1024)\n"},
      {"launch -n 0 -- true", "error: -n 0: the number of ranks must be between 1 and 1024\n"},
      {"launch -n 1025 -- true", "error: -n 1025: the number of ranks must be between 1 and 1024\n"},
      {"launch -n 2", "error: launch needs a command to run: flexpipe launch -n N [OPTIONS] -- COMMAND [ARGS...]\n"},
      {"launch -n 2 --", "error: launch needs a command to run: flexpipe launch -n N [OPTIONS] -- COMMAND [ARGS...]\n"},
      {"launch -n 2 --master-port 0 -- true", "error: --master-port 0: must be between 1 and 65535\n"},
      {"launch -n 2 --master-port 65536 -- true", "error: --master-port 65536: must be between 1 and 65535\n"},
      {"launch -n 2 --grace -1 -- true",
       "error: --grace: '-1' is not a time of at least 0; write 10s, 500ms or 10 (seconds) (see flexpipe launch "
       "--help)\n"},
      {"launch -n 2 --grace 2d -- true",
       "error: --grace: '2d' is not a time; write 10s, 500ms or 10 (seconds) (see flexpipe launch --help)\n"},
      {"launch -n 2 --grace 25h -- true", "error: --grace 90000: must be between 0 and 86400 seconds\n"},
      {"launch -n 2 --nnodes 0 -- true", "error: --nnodes 0: the number of nodes must be between 1 and 65536\n"},
      {"launch -n 2 --nnodes 2 --node-rank 2 --master-addr h --master-port 1 -- true",
       "error: --node-rank 2: must be between 0 and 1 (--nnodes 2)\n"},
      {"launch -n 2 --node-rank 1 -- true", "error: --node-rank 1: must be between 0 and 0 (--nnodes 1)\n"},
      {"launch -n 2 --nnodes 2 --master-port 29500 -- true",
       "error: --nnodes 2: every node's launcher needs the same --master-addr (node 0's address) and --master-port\n"},
      {"launch -n 2 --nnodes 2 --master-addr h -- true",
       "error: --nnodes 2: every node's launcher needs the same --master-addr (node 0's address) and --master-port\n"},
  };
  expect_refused(cases);
  EXPECT_EQ(flexpipe("launch -n two -- true").exit_code, 2);
}

TEST_F(Launch, HelpDescribesEverything) {
  const Outcome run = flexpipe("launch --help");
  ASSERT_EQ(run.exit_code, 0);
  for (const char* text : {"-n,--nproc-per-node",
                           "--nnodes",
                           "--node-rank",
                           "--master-addr",
                           "--master-port",
                           "--grace",
                           "--tag-output",
                           "RANK=R*K+i",
                           "WORLD_SIZE=N*K",
                           "LOCAL_RANK=i",
                           "LOCAL_WORLD_SIZE=K",
                           "GROUP_RANK=R",
                           "MASTER_ADDR",
                           "TORCHELASTIC_USE_AGENT_STORE=False",
                           "OMP_NUM_THREADS=1",
                           "OPENBLAS_NUM_THREADS=1",
                           "process group",
                           "SIGINT, SIGTERM and SIGHUP",
                           "SIGKILL 3 s later",
                           "Exit code",
                           "127",
                           "-- python train.py"})
    EXPECT_NE(run.out.find(text), std::string::npos) << text;
}

}  // namespace
