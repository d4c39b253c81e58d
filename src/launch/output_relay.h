// flexpipe launch's output: its own report lines, and --tag-output's line-by-line relay of a rank's stdout or stderr.
#pragma once
#include <unistd.h>

#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace flexpipe::launcher {

// Writes all of `text` across partial writes, interrupted calls and a non-blocking descriptor.
// False on an error: EPIPE means the reader is gone.
bool write_all(int fd, std::string_view text);

// The launcher's own reports: one line in one write, so that it never lands inside a line a rank
// writes to the same stderr.
template <typename... Args>
void report(fmt::format_string<Args...> format, Args&&... args) {
  write_all(STDERR_FILENO, "flexpipe launch: " + fmt::format(format, std::forward<Args>(args)...) + "\n");
}

// A rank's stdout or stderr through a pipe, forwarded line by line with a prefix.
class TaggedStream {
 public:
  TaggedStream(int read_fd, int destination, std::string tag)
      : fd_(read_fd), destination_(destination), tag_(std::move(tag)) {}
  TaggedStream(TaggedStream&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)),
        destination_(other.destination_),
        tag_(std::move(other.tag_)),
        partial_(std::move(other.partial_)) {}
  TaggedStream(const TaggedStream&) = delete;
  TaggedStream& operator=(const TaggedStream&) = delete;
  ~TaggedStream() { close(); }

  bool open() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Forwards the complete lines of up to `max_reads` reads of what the pipe holds now; at end of
  // file, also the last partial line, and closes the pipe.
  void pump(int max_reads);

  // Forwards what is left: the rest of the pipe as far as it can be read now, and the partial line.
  void finish();

 private:
  void forward_complete_lines();
  void write(const std::string& text);
  void close();
  void close_fd();

  int fd_;
  int destination_;
  std::string tag_;
  std::string partial_;  // the start of a line not yet complete
};

}  // namespace flexpipe::launcher
