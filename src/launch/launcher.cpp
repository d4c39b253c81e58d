// flexpipe launch's supervisor. One single-threaded poll loop waits on a self-pipe that the signal
// handlers write to (SIGCHLD, and the SIGINT/SIGTERM/SIGHUP it relays), on the ranks' output pipes
// under --tag-output, and on the shutdown deadlines. Every rank runs in its own process group, so
// that a signal to the group also reaches whatever the rank started (data-loader workers, shells).
#include "flexpipe/launch/launcher.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "output_relay.h"
#include "rank_process.h"
#include "signal_relay.h"

extern char** environ;

namespace flexpipe {

namespace {

using launcher::Rank;
using launcher::report;
using launcher::SignalRelay;
using launcher::spawn_rank;
using launcher::Started;
using launcher::TaggedStream;
using launcher::write_all;

using Clock = std::chrono::steady_clock;

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

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

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, int master_port, SignalRelay& relay)
      : options_(options),
        master_port_(master_port),
        relay_(relay),
        node_(options.nodes > 1 ? fmt::format("node {}: ", options.node_rank) : "") {}

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

  void start_ranks() {
    std::vector<std::string> base;
    for (char** entry = environ; *entry; ++entry) base.emplace_back(*entry);
    ranks_.reserve(static_cast<size_t>(options_.ranks));
    const int first = options_.node_rank * options_.ranks;
    for (int i = first; i < first + options_.ranks; ++i) {
      ranks_.push_back(Rank{});
      ranks_.back().index = i;
      const Started started = spawn_rank(ranks_.back(), options_, master_port_, base, relay_);
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
      if (::kill(-rank.pid, 0) != 0 && errno == ESRCH)
        rank.group_tracked = false;
      else
        left = true;
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
        report("{}received {}; forwarding it to {}", node_, signal_name(sig), tracked_ranks());
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
      if (!rank.exec_errno) report("{}rank {} (pid {}) {}", node_, rank.index, rank.pid, how);
      begin_shutdown(fmt::format("rank {} failed", rank.index));
    }
    if (phase_ == Phase::kRunning) rank.group_tracked = false;
  }

  // A failure or a relayed signal starts the clock: the grace period, then SIGTERM, then SIGKILL.
  void begin_shutdown(const std::string& cause) {
    if (phase_ != Phase::kRunning) return;
    phase_ = Phase::kGrace;
    cause_ = cause;
    deadline_ = Clock::now() +
                std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_seconds));
  }

  void escalate() {
    if (!timed_phase() || Clock::now() < deadline_) return;
    const bool groups_left = any_group_left();  // also forgets the groups found empty, for the report
    if (running_count() == 0 && !groups_left) return;
    if (phase_ == Phase::kGrace) {
      report("{}sending SIGTERM to {}: still running {:g} s after {}", node_, tracked_ranks(), options_.grace_seconds,
             cause_);
      signal_groups(SIGTERM);
      // A stopped process acts on SIGTERM only once continued.
      signal_groups(SIGCONT);
      phase_ = Phase::kTerminated;
      deadline_ =
          Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kTermToKillSeconds));
    } else {
      report("{}sending SIGKILL to {}: still running {:g} s after SIGTERM", node_, tracked_ranks(), kTermToKillSeconds);
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
      if (rank.running)
        ::kill(rank.pid, sig);
      else
        rank.group_tracked = false;
    }
  }

  const LaunchOptions& options_;
  const int master_port_;
  SignalRelay& relay_;
  const std::string
      node_;  // "node 1: " before every report when the job spans nodes, so that logs merged tell them apart
  std::vector<Rank> ranks_;
  Phase phase_ = Phase::kRunning;
  Clock::time_point deadline_{};
  std::string cause_;                 // what started the shutdown, for the reports
  std::optional<int> first_failure_;  // exit code of the first rank that failed
  int interrupted_by_ = 0;            // the first signal relayed
};

}  // namespace

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

}  // namespace flexpipe
