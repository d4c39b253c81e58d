// Starting one rank of flexpipe launch: the pipes it needs, fork, its own process group, then exec.
#include "rank_process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <cerrno>
#include <cstring>
#include <initializer_list>

#include <fmt/format.h>

namespace flexpipe::launcher {

namespace {

// Makes `from` the child's descriptor `to`, inherited across exec. Async-signal-safe.
void move_fd(int from, int to) {
  if (from == to)
    ::fcntl(to, F_SETFD, 0);  // dup2 would keep close-on-exec
  else
    ::dup2(from, to);
}

// Everything one fork needs, prepared beforehand: after fork() the child only makes system calls.
struct ChildSetup {
  std::vector<char*> argv;
  std::vector<char*> envp;
  pid_t launcher = 0;
  int stdin_fd = -1;                   // /dev/null when the launcher's stdin is a terminal
  int stdout_fd = -1, stderr_fd = -1;  // pipe write ends under --tag-output
  int exec_status_fd = -1;             // receives errno when exec fails; closed by a successful exec
};

[[noreturn]] void run_child(const ChildSetup& setup, const SignalRelay& relay, const sigset_t& mask) {
  relay.restore_in_child();
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::setpgid(0, 0);
#ifdef __linux__
  // Should the launcher itself be killed (SIGKILL, the OOM killer), its ranks must not live on unsupervised.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != setup.launcher) ::_exit(1);  // it died before prctl took effect
#endif
  // A terminal belongs to the launcher's foreground process group: a rank in its own group that read
  // it would be stopped by SIGTTIN, so it reads /dev/null instead.
  if (setup.stdin_fd >= 0) move_fd(setup.stdin_fd, STDIN_FILENO);
  if (setup.stdout_fd >= 0) move_fd(setup.stdout_fd, STDOUT_FILENO);
  if (setup.stderr_fd >= 0) move_fd(setup.stderr_fd, STDERR_FILENO);
  ::execvpe(setup.argv[0], setup.argv.data(), setup.envp.data());
  const int error = errno;
  if (::write(setup.exec_status_fd, &error, sizeof error) < 0) {}
  // The shell's codes: 127 not found, 126 found but not executable.
  ::_exit(error == ENOENT || error == ENOTDIR ? 127 : 126);
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (std::string& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

// A pipe whose read end (the launcher's) is non-blocking and neither end leaks into exec'd programs.
bool make_pipe(int fds[2], bool nonblocking_read) {
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  if (nonblocking_read) ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  return true;
}

void close_all(std::initializer_list<int> fds) {
  for (const int fd : fds)
    if (fd >= 0) ::close(fd);
}

}  // namespace

Started spawn_rank(Rank& rank, const LaunchOptions& options, int master_port, const std::vector<std::string>& base,
                   const SignalRelay& relay) {
  std::vector<std::string> argv = options.command;
  RankPlace place;
  place.local_rank = rank.index - options.node_rank * options.ranks;
  place.local_world_size = options.ranks;
  place.node_rank = options.node_rank;
  place.nodes = options.nodes;
  std::vector<std::string> env = rank_environment(base, place, options.master_addr, master_port);
  ChildSetup setup;
  setup.argv = pointers(argv);
  setup.envp = pointers(env);
  setup.launcher = ::getpid();

  int status_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  int dev_null = -1;
  bool ok = make_pipe(status_pipe, false);
  if (ok && options.tag_output) ok = make_pipe(out_pipe, true) && make_pipe(err_pipe, true);
  if (ok && ::isatty(STDIN_FILENO)) ok = (dev_null = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;
  if (!ok) {
    report("rank {}: cannot start: {}", rank.index, std::strerror(errno));
    close_all({status_pipe[0], status_pipe[1], out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1], dev_null});
    return Started::kNotStarted;
  }
  setup.stdin_fd = dev_null;
  setup.stdout_fd = out_pipe[1];
  setup.stderr_fd = err_pipe[1];
  setup.exec_status_fd = status_pipe[1];

  const sigset_t handled = SignalRelay::handled_set();
  sigset_t previous;
  ::sigprocmask(SIG_BLOCK, &handled, &previous);
  const pid_t pid = ::fork();
  if (pid == 0) run_child(setup, relay, previous);
  const int fork_errno = errno;
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  close_all({status_pipe[1], out_pipe[1], err_pipe[1], dev_null});
  if (pid < 0) {
    report("rank {}: cannot start: fork: {}", rank.index, std::strerror(fork_errno));
    close_all({status_pipe[0], out_pipe[0], err_pipe[0]});
    return Started::kNotStarted;
  }
  // The child does the same; doing it here too means it holds however the two race.
  ::setpgid(pid, pid);
  rank.pid = pid;
  rank.running = true;
  rank.group_tracked = true;
  if (options.tag_output) {
    const std::string tag = fmt::format("[rank {}] ", rank.index);
    rank.output.emplace_back(out_pipe[0], STDOUT_FILENO, tag);
    rank.output.emplace_back(err_pipe[0], STDERR_FILENO, tag);
  }
  // End of file: exec succeeded. Waiting for it also means the child's setpgid is done before any
  // signal is sent to its group.
  int exec_errno = 0;
  ssize_t n;
  do n = ::read(status_pipe[0], &exec_errno, sizeof exec_errno);
  while (n < 0 && errno == EINTR);
  ::close(status_pipe[0]);
  if (n != static_cast<ssize_t>(sizeof exec_errno)) return Started::kYes;
  rank.exec_errno = exec_errno;
  report("rank {}: cannot run '{}': {}", rank.index, options.command[0], std::strerror(exec_errno));
  return Started::kNotExecuted;
}

}  // namespace flexpipe::launcher
