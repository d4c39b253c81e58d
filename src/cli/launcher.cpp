// flexpipe launch's supervisor. One single-threaded poll loop waits on a self-pipe that the signal
// handlers write to (SIGCHLD, and the SIGINT/SIGTERM/SIGHUP it relays), on the ranks' output pipes
// under --tag-output, and on the shutdown deadlines. Every rank runs in its own process group, so
// that a signal to the group also reaches whatever the rank started (data-loader workers, shells).
#include "launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

extern char** environ;

namespace flexpipe::cli {

namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Writing

// Writes all of `text` across partial writes, interrupted calls and a non-blocking descriptor.
// False on an error: EPIPE means the reader is gone.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n >= 0) {
      text.remove_prefix(static_cast<size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd writable{fd, POLLOUT, 0};
      ::poll(&writable, 1, -1);
    } else if (errno != EINTR) {
      return false;
    }
  }
  return true;
}

// The launcher's own reports: one line in one write, so that it never lands inside a line a rank
// writes to the same stderr.
template <typename... Args>
void report(fmt::format_string<Args...> format, Args&&... args) {
  write_all(STDERR_FILENO, "flexpipe launch: " + fmt::format(format, std::forward<Args>(args)...) + "\n");
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

// ---------------------------------------------------------------------------------------------
// Signals

// The signals relayed to the ranks. One that was ignored when the launcher started (nohup, a
// background job of a script) stays ignored, as it would be for the command run directly.
constexpr std::array<int, 3> kRelayed = {SIGINT, SIGTERM, SIGHUP};
// Everything the launcher changes, and restores in each child before exec.
constexpr std::array<int, 5> kHandled = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE};

int g_wake_fd = -1;               // write end of the self-pipe
volatile sig_atomic_t g_pending[NSIG];  // a relayed signal arrived and is not yet relayed

extern "C" void on_signal(int sig) {
  const int saved_errno = errno;
  if (sig != SIGCHLD) g_pending[sig] = 1;
  const char byte = 0;
  // A full pipe already holds a wake-up: nothing is lost by dropping this one.
  if (::write(g_wake_fd, &byte, 1) < 0) {
  }
  errno = saved_errno;
}

// Installs the handlers for the lifetime of one launch and restores the launcher's own
// dispositions afterwards (and in every child, before exec).
class SignalRelay {
 public:
  SignalRelay() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(fmt::format("launch: cannot create a pipe: {}", std::strerror(errno)));
    wake_read_ = fds[0];
    g_wake_fd = fds[1];
    for (size_t i = 0; i < kHandled.size(); ++i) {
      const int sig = kHandled[i];
      ::sigaction(sig, nullptr, &entry_[i]);
      g_pending[sig] = 0;
      struct sigaction action {};
      sigemptyset(&action.sa_mask);
      if (sig == SIGPIPE) {
        // A closed stdout must not kill the launcher before it has ended the ranks: writes fail with EPIPE.
        action.sa_handler = SIG_IGN;
      } else if (sig != SIGCHLD && entry_[i].sa_handler == SIG_IGN) {
        continue;
      } else {
        action.sa_handler = on_signal;
        // SA_RESTART keeps blocking reads and writes going; poll() still returns EINTR, which the loop expects.
        action.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
      }
      ::sigaction(sig, &action, nullptr);
    }
  }
  ~SignalRelay() {
    for (size_t i = 0; i < kHandled.size(); ++i) ::sigaction(kHandled[i], &entry_[i], nullptr);
    ::close(g_wake_fd);
    ::close(wake_read_);
    g_wake_fd = -1;
  }
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  int wake_fd() const { return wake_read_; }

  void drain_wakeups() {
    char buffer[256];
    while (::read(wake_read_, buffer, sizeof buffer) > 0) {
    }
  }

  // The relayed signals that arrived since the last call.
  std::vector<int> take_pending() {
    std::vector<int> arrived;
    for (const int sig : kRelayed)
      if (g_pending[sig]) g_pending[sig] = 0, arrived.push_back(sig);
    return arrived;
  }

  // The set to block around fork(), so that no handler runs in a child before it restores the dispositions.
  static sigset_t handled_set() {
    sigset_t set;
    sigemptyset(&set);
    for (const int sig : kHandled) sigaddset(&set, sig);
    return set;
  }

  // In a forked child: the dispositions the launcher started with (a handler of ours becomes the
  // default). Async-signal-safe.
  void restore_in_child() const {
    for (size_t i = 0; i < kHandled.size(); ++i) {
      struct sigaction action {};
      sigemptyset(&action.sa_mask);
      action.sa_handler = entry_[i].sa_handler == SIG_IGN ? SIG_IGN : SIG_DFL;
      ::sigaction(kHandled[i], &action, nullptr);
    }
  }

 private:
  int wake_read_ = -1;
  std::array<struct sigaction, kHandled.size()> entry_{};
};

// While a launch runs, what a rank started and left behind when it died is re-parented to the
// launcher rather than to init (Linux), so the launcher reaps it itself: the rank's process group is
// seen empty as soon as it is, even where init reaps late or not at all (containers), and no zombie
// is left behind. Elsewhere a no-op: the groups are then waited for until SIGKILL at the latest.
class Subreaper {
 public:
  Subreaper() {
#ifdef __linux__
    ::prctl(PR_GET_CHILD_SUBREAPER, &previous_);
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
  }
  ~Subreaper() {
#ifdef __linux__
    ::prctl(PR_SET_CHILD_SUBREAPER, previous_);
#endif
  }
  Subreaper(const Subreaper&) = delete;
  Subreaper& operator=(const Subreaper&) = delete;

 private:
  [[maybe_unused]] int previous_ = 0;
};

// ---------------------------------------------------------------------------------------------
// --tag-output: a rank's stdout or stderr through a pipe, forwarded line by line with a prefix

// A line longer than this is forwarded in pieces, each prefixed, rather than held without bound.
constexpr size_t kMaxLine = 64 * 1024;

class TaggedStream {
 public:
  TaggedStream(int read_fd, int destination, std::string tag)
      : fd_(read_fd), destination_(destination), tag_(std::move(tag)) {}
  TaggedStream(TaggedStream&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), destination_(other.destination_), tag_(std::move(other.tag_)),
        partial_(std::move(other.partial_)) {}
  TaggedStream(const TaggedStream&) = delete;
  TaggedStream& operator=(const TaggedStream&) = delete;
  ~TaggedStream() { close(); }

  bool open() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Forwards the complete lines of up to `max_reads` reads of what the pipe holds now; at end of
  // file, also the last partial line, and closes the pipe.
  void pump(int max_reads) {
    char buffer[64 * 1024];
    for (int i = 0; i < max_reads && open(); ++i) {
      const ssize_t n = ::read(fd_, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      if (n <= 0) {
        close();
        return;
      }
      partial_.append(buffer, static_cast<size_t>(n));
      forward_complete_lines();
    }
  }

  // Forwards what is left: the rest of the pipe as far as it can be read now, and the partial line.
  void finish() {
    pump(64);
    close();
  }

 private:
  void forward_complete_lines() {
    std::string out;
    size_t start = 0;
    for (;;) {
      const size_t newline = partial_.find('\n', start);
      const size_t end = newline == std::string::npos ? partial_.size() : newline + 1;
      if (newline == std::string::npos && end - start < kMaxLine) break;
      const size_t stop = std::min(end, start + kMaxLine);
      out += tag_;
      out.append(partial_, start, stop - start);
      if (out.back() != '\n') out += '\n';
      start = stop;
    }
    partial_.erase(0, start);
    if (!out.empty()) write(out);
  }

  void write(const std::string& text) {
    // The reader of the launcher's stdout is gone: close the pipe, so that the rank's next write
    // fails as it would have without --tag-output (SIGPIPE), rather than filling a pipe nobody drains.
    if (!write_all(destination_, text)) partial_.clear(), close_fd();
  }

  void close() {
    if (!partial_.empty() && open()) write(tag_ + partial_ + "\n");
    partial_.clear();
    close_fd();
  }

  void close_fd() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_;
  int destination_;
  std::string tag_;
  std::string partial_;  // the start of a line not yet complete
};

// ---------------------------------------------------------------------------------------------
// Ranks

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;             // started and not yet reaped
  // Its process group may still hold what it started, and the launcher is to end that: from the
  // start until the group is found empty, except for a rank that finished normally (exit 0 before
  // any failure), whose leftovers are its own business, as if it had been run directly.
  bool group_tracked = false;
  int exit_code = 0;               // once reaped: the code, or 128 + signal
  int exec_errno = 0;              // the command could not be executed (reported when it happened)
  std::vector<TaggedStream> output;  // stdout and stderr pipes under --tag-output
};

// Makes `from` the child's descriptor `to`, inherited across exec. Async-signal-safe.
void move_fd(int from, int to) {
  if (from == to) ::fcntl(to, F_SETFD, 0);  // dup2 would keep close-on-exec
  else ::dup2(from, to);
}

// Everything one fork needs, prepared beforehand: after fork() the child only makes system calls.
struct ChildSetup {
  std::vector<char*> argv;
  std::vector<char*> envp;
  pid_t launcher = 0;
  int stdin_fd = -1;  // /dev/null when the launcher's stdin is a terminal
  int stdout_fd = -1, stderr_fd = -1;  // pipe write ends under --tag-output
  int exec_status_fd = -1;  // receives errno when exec fails; closed by a successful exec
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
  if (::write(setup.exec_status_fd, &error, sizeof error) < 0) {
  }
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

// ---------------------------------------------------------------------------------------------
// The supervisor

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, int master_port, SignalRelay& relay)
      : options_(options), master_port_(master_port), relay_(relay) {}

  int run() {
    start_ranks();
    while (running_count() > 0 || (timed_phase() && any_group_left())) {
      wait_for_event();
      relay_.drain_wakeups();
      relay_signals();
      reap();
      escalate();
    }
    for (Rank& rank : ranks_)
      for (TaggedStream& stream : rank.output) stream.finish();
    if (first_failure_) return *first_failure_;
    return interrupted_by_ ? 128 + interrupted_by_ : 0;
  }

 private:
  enum class Phase { kRunning, kGrace, kTerminated, kKilled };

  enum class Started { kYes, kNotExecuted, kNotStarted };

  void start_ranks() {
    std::vector<std::string> base;
    for (char** entry = environ; *entry; ++entry) base.emplace_back(*entry);
    ranks_.reserve(static_cast<size_t>(options_.ranks));
    for (int i = 0; i < options_.ranks; ++i) {
      ranks_.push_back(Rank{});
      ranks_.back().index = i;
      const Started started = spawn(ranks_.back(), base);
      if (started == Started::kYes) continue;
      // The remaining ranks would fail the same way. The child that could not run its command exits 127
      // and is reaped as a failed rank; one that never started is a failure right here.
      if (started == Started::kNotStarted) {
        ranks_.pop_back();
        first_failure_ = 1;
        begin_shutdown(fmt::format("rank {} could not start", i));
      }
      return;
    }
  }

  // Starts one rank. Reports here when it cannot (kNotStarted: no child) or when its command cannot be
  // executed (kNotExecuted: the child exits 127 or 126 and is reaped as usual).
  Started spawn(Rank& rank, const std::vector<std::string>& base) {
    std::vector<std::string> argv = options_.command;
    std::vector<std::string> env =
        rank_environment(base, rank.index, options_.ranks, options_.master_addr, master_port_);
    ChildSetup setup;
    setup.argv = pointers(argv);
    setup.envp = pointers(env);
    setup.launcher = ::getpid();

    int status_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    int dev_null = -1;
    bool ok = make_pipe(status_pipe, false);
    if (ok && options_.tag_output) ok = make_pipe(out_pipe, true) && make_pipe(err_pipe, true);
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
    if (pid == 0) run_child(setup, relay_, previous);
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
    if (options_.tag_output) {
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
    report("rank {}: cannot run '{}': {}", rank.index, options_.command[0], std::strerror(exec_errno));
    return Started::kNotExecuted;
  }

  size_t running_count() const {
    size_t count = 0;
    for (const Rank& rank : ranks_) count += rank.running;
    return count;
  }

  // A deadline is set: the grace period or the time between SIGTERM and SIGKILL.
  bool timed_phase() const { return phase_ == Phase::kGrace || phase_ == Phase::kTerminated; }

  // Whether some reaped rank's group still holds processes; stops tracking the groups found empty.
  // A group of zombies nobody reaps (a container without an init) counts as alive, which is why the
  // launcher waits for groups only until SIGKILL is sent.
  bool any_group_left() {
    bool left = false;
    for (Rank& rank : ranks_) {
      if (rank.running || !rank.group_tracked) continue;
      if (::kill(-rank.pid, 0) != 0 && errno == ESRCH) rank.group_tracked = false;
      else left = true;
    }
    return left;
  }

  // The ranks whose groups are tracked, as "ranks 0-2, 5".
  std::string tracked_ranks() const {
    std::vector<int> indices;
    for (const Rank& rank : ranks_)
      if (rank.group_tracked) indices.push_back(rank.index);
    std::string text = indices.size() == 1 ? "rank" : "ranks";
    for (size_t i = 0; i < indices.size();) {
      size_t j = i;
      while (j + 1 < indices.size() && indices[j + 1] == indices[j] + 1) ++j;
      text += fmt::format("{}{}", i == 0 ? " " : ", ", indices[i]);
      if (j > i) text += fmt::format("-{}", indices[j]);
      i = j + 1;
    }
    return text;
  }

  // Sleeps until a signal, a child's exit, output to forward or the next deadline.
  void wait_for_event() {
    std::vector<pollfd> fds = {{relay_.wake_fd(), POLLIN, 0}};
    std::vector<TaggedStream*> streams = {nullptr};
    for (Rank& rank : ranks_)
      for (TaggedStream& stream : rank.output)
        if (stream.open()) fds.push_back({stream.fd(), POLLIN, 0}), streams.push_back(&stream);
    int timeout_ms = -1;
    if (timed_phase()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      // Processes that are not the launcher's children end without a SIGCHLD: look again soon.
      const int64_t limit = running_count() > 0 ? 1000 * 1000 : 50;
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, limit));
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;  // timeout, or EINTR: a handler ran
    // One read per stream and turn, so that a rank that never stops printing cannot starve the others.
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents) streams[i]->pump(1);
  }

  void relay_signals() {
    for (const int sig : relay_.take_pending()) {
      if (!interrupted_by_) interrupted_by_ = sig;
      if (running_count() > 0 || any_group_left()) {
        report("received {}; forwarding it to {}", signal_name(sig), tracked_ranks());
        signal_groups(sig);
      }
      begin_shutdown(signal_name(sig));
    }
  }

  // Collects every child that has ended: ranks, and the orphans of ranks, adopted as a subreaper.
  void reap() {
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0) {
        // No children at all while ranks are unreaped: cannot happen while our SIGCHLD handler is
        // installed. Never report that as success.
        const std::string why = fmt::format("could not be waited for: {}", std::strerror(errno));
        for (Rank& rank : ranks_)
          if (rank.running) ended(rank, 1, why);
        return;
      }
      if (pid == 0) return;
      for (Rank& rank : ranks_)
        if (rank.running && rank.pid == pid) ended(rank, exit_code_of(status), describe_wait_status(status));
    }
  }

  void ended(Rank& rank, int exit_code, const std::string& how) {
    rank.running = false;
    rank.exit_code = exit_code;
    // Its last words come before the launcher's report about it.
    for (TaggedStream& stream : rank.output) stream.pump(16);
    if (exit_code != 0 && !first_failure_) {
      first_failure_ = exit_code;
      if (!rank.exec_errno) report("rank {} (pid {}) {}", rank.index, rank.pid, how);
      begin_shutdown(fmt::format("rank {} failed", rank.index));
    }
    if (phase_ == Phase::kRunning) rank.group_tracked = false;
  }

  // A failure or a relayed signal starts the clock: the grace period, then SIGTERM, then SIGKILL.
  void begin_shutdown(const std::string& cause) {
    if (phase_ != Phase::kRunning) return;
    phase_ = Phase::kGrace;
    cause_ = cause;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(options_.grace_seconds));
  }

  void escalate() {
    if (!timed_phase() || Clock::now() < deadline_) return;
    const bool groups_left = any_group_left();  // also forgets the groups found empty, for the report
    if (running_count() == 0 && !groups_left) return;
    if (phase_ == Phase::kGrace) {
      report("sending SIGTERM to {}: still running {:g} s after {}", tracked_ranks(), options_.grace_seconds,
             cause_);
      signal_groups(SIGTERM);
      // A stopped process acts on SIGTERM only once continued.
      signal_groups(SIGCONT);
      phase_ = Phase::kTerminated;
      deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(kTermToKillSeconds));
    } else {
      report("sending SIGKILL to {}: still running {:g} s after SIGTERM", tracked_ranks(), kTermToKillSeconds);
      signal_groups(SIGKILL);
      phase_ = Phase::kKilled;
    }
  }

  // The process group of every tracked rank: the rank and everything it started.
  void signal_groups(int sig) {
    for (Rank& rank : ranks_) {
      if (!rank.group_tracked) continue;
      if (::kill(-rank.pid, sig) == 0 || errno != ESRCH) continue;
      // No such group: a running rank left it (setsid) and can still be reached itself; a reaped
      // rank's group has emptied.
      if (rank.running) ::kill(rank.pid, sig);
      else rank.group_tracked = false;
    }
  }

  const LaunchOptions& options_;
  const int master_port_;
  SignalRelay& relay_;
  std::vector<Rank> ranks_;
  Phase phase_ = Phase::kRunning;
  Clock::time_point deadline_{};
  std::string cause_;                   // what started the shutdown, for the reports
  std::optional<int> first_failure_;    // exit code of the first rank that failed
  int interrupted_by_ = 0;              // the first signal relayed
};

}  // namespace

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw Error(fmt::format("launch: cannot open a socket to find a free port: {}", std::strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    throw Error(fmt::format("launch: cannot find a free port on 127.0.0.1: {}", std::strerror(error)));
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

std::vector<std::string> rank_environment(const std::vector<std::string>& base, int rank, int world_size,
                                          const std::string& master_addr, int master_port) {
  const std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_RANK", std::to_string(rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(world_size)},
      {"MASTER_ADDR", master_addr},
      {"MASTER_PORT", std::to_string(master_port)}};
  // Several ranks on one machine, each with a thread per core, would oversubscribe it (torchrun does the same).
  std::vector<std::pair<std::string, bool>> defaults = {{"OMP_NUM_THREADS", world_size > 1},
                                                        {"OPENBLAS_NUM_THREADS", world_size > 1}};
  std::vector<std::string> env;
  for (const std::string& entry : base) {
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& [key, value] : set) replaced |= key == name;
    if (replaced) continue;
    for (auto& [key, wanted] : defaults)
      if (key == name) wanted = false;
    env.push_back(entry);
  }
  for (const auto& [key, value] : set) env.push_back(key + "=" + value);
  for (const auto& [key, wanted] : defaults)
    if (wanted) env.push_back(key + "=1");
  return env;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return fmt::format("was killed by signal {} ({}){}", sig, ::strsignal(sig),
                       WCOREDUMP(status) ? ", core dumped" : "");
  }
  return fmt::format("ended with wait status {}", status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int launch(const LaunchOptions& options) {
  const int port = options.master_port > 0 ? options.master_port : free_tcp_port();
  const Subreaper subreaper;
  SignalRelay relay;
  return Supervisor(options, port, relay).run();
}

}  // namespace flexpipe::cli
