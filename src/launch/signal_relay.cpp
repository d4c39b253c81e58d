// flexpipe launch's signal relay: SIGCHLD and the relayed signals become a byte on a self-pipe and a pending flag.
#include "signal_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "flexpipe/support/error.h"

namespace flexpipe::launcher {

namespace {

int g_wake_fd = -1;                     // write end of the self-pipe
volatile sig_atomic_t g_pending[NSIG];  // a relayed signal arrived and is not yet relayed

extern "C" void on_signal(int sig) {
  const int saved_errno = errno;
  if (sig != SIGCHLD) g_pending[sig] = 1;
  const char byte = 0;
  // A full pipe already holds a wake-up: nothing is lost by dropping this one.
  if (::write(g_wake_fd, &byte, 1) < 0) {}
  errno = saved_errno;
}

}  // namespace

SignalRelay::SignalRelay() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(fmt::format("launch: cannot create a pipe: {}", std::strerror(errno)));
  wake_read_ = fds[0];
  g_wake_fd = fds[1];
  for (size_t i = 0; i < kHandledSignals.size(); ++i) {
    const int sig = kHandledSignals[i];
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

SignalRelay::~SignalRelay() {
  for (size_t i = 0; i < kHandledSignals.size(); ++i) ::sigaction(kHandledSignals[i], &entry_[i], nullptr);
  ::close(g_wake_fd);
  ::close(wake_read_);
  g_wake_fd = -1;
}

void SignalRelay::drain_wakeups() {
  char buffer[256];
  while (::read(wake_read_, buffer, sizeof buffer) > 0) {}
}

std::vector<int> SignalRelay::take_pending() {
  std::vector<int> arrived;
  for (const int sig : kRelayedSignals)
    if (g_pending[sig]) g_pending[sig] = 0, arrived.push_back(sig);
  return arrived;
}

sigset_t SignalRelay::handled_set() {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : kHandledSignals) sigaddset(&set, sig);
  return set;
}

void SignalRelay::restore_in_child() const {
  for (size_t i = 0; i < kHandledSignals.size(); ++i) {
    struct sigaction action {};
    sigemptyset(&action.sa_mask);
    action.sa_handler = entry_[i].sa_handler == SIG_IGN ? SIG_IGN : SIG_DFL;
    ::sigaction(kHandledSignals[i], &action, nullptr);
  }
}

}  // namespace flexpipe::launcher
