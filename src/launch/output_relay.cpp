// flexpipe launch's output: whole writes, and the --tag-output relay that prefixes each line a rank prints.
#include "output_relay.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>

namespace flexpipe::launcher {

namespace {

// A line longer than this is forwarded in pieces, each prefixed, rather than held without bound.
constexpr size_t kMaxLine = 64 * 1024;

}  // namespace

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

void TaggedStream::pump(int max_reads) {
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

void TaggedStream::finish() {
  pump(64);
  close();
}

void TaggedStream::forward_complete_lines() {
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

void TaggedStream::write(const std::string& text) {
  // The reader of the launcher's stdout is gone: close the pipe, so that the rank's next write
  // fails as it would have without --tag-output (SIGPIPE), rather than filling a pipe nobody drains.
  if (!write_all(destination_, text)) partial_.clear(), close_fd();
}

void TaggedStream::close() {
  if (!partial_.empty() && open()) write(tag_ + partial_ + "\n");
  partial_.clear();
  close_fd();
}

void TaggedStream::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace flexpipe::launcher
