// flexpipe launch's signal relay: the handlers that wake its poll loop through a self-pipe, installed for one launch.
#pragma once
#include <signal.h>

#include <array>
#include <vector>

namespace flexpipe::launcher {

// The signals relayed to the ranks. One that was ignored when the launcher started (nohup, a
// background job of a script) stays ignored, as it would be for the command run directly.
inline constexpr std::array<int, 3> kRelayedSignals = {SIGINT, SIGTERM, SIGHUP};
// Everything the launcher changes, and restores in each child before exec.
inline constexpr std::array<int, 5> kHandledSignals = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGPIPE};

// Installs the handlers for the lifetime of one launch and restores the launcher's own
// dispositions afterwards (and in every child, before exec).
class SignalRelay {
 public:
  SignalRelay();
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  int wake_fd() const { return wake_read_; }
  void drain_wakeups();

  // The relayed signals that arrived since the last call.
  std::vector<int> take_pending();

  // The set to block around fork(), so that no handler runs in a child before it restores the dispositions.
  static sigset_t handled_set();

  // In a forked child: the dispositions the launcher started with (a handler of ours becomes the
  // default). Async-signal-safe.
  void restore_in_child() const;

 private:
  int wake_read_ = -1;
  std::array<struct sigaction, kHandledSignals.size()> entry_{};
};

}  // namespace flexpipe::launcher
