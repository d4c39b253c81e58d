// The project's file helpers: whole-file reads, and writes that never leave a half-written file.
#include "flexpipe/support/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/quantity.h"

namespace flexpipe {

namespace {

[[noreturn]] void fail_errno(const std::string& path, const char* what, int error) {
  throw Error(fmt::format("{}: cannot {}: {}", path, what, std::strerror(error)));
}

// Closes the descriptor on every path out, errors included.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// "is a FIFO, not a regular file"; empty for a regular file.
std::string file_kind_refusal(mode_t mode) {
  if (S_ISREG(mode)) return "";
  const char* kind = S_ISDIR(mode)    ? "a directory"
                     : S_ISFIFO(mode) ? "a FIFO"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "a special file";
  return fmt::format("is {}, not a regular file", kind);
}

}  // namespace

std::string why_not_a_regular_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return errno == ENOENT ? "no such file" : std::strerror(errno);
  return file_kind_refusal(info.st_mode);
}

std::string read_text_file(const std::string& path, size_t limit) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever. The kind is
  // checked before a byte is read, since a FIFO or a device (/dev/zero, /dev/urandom) has no end.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  struct stat info {};
  if (fd.get() < 0) {
    // A socket cannot be opened at all ("No such device or address"): say what it is instead.
    const int error = errno;
    if (::stat(path.c_str(), &info) != 0 || S_ISREG(info.st_mode)) fail_errno(path, "read", error);
  } else if (::fstat(fd.get(), &info) != 0) {
    fail_errno(path, "read", errno);
  }
  if (const std::string refusal = file_kind_refusal(info.st_mode); !refusal.empty())
    throw Error(fmt::format("{}: cannot read: {}", path, refusal));
  const std::string most = format_bytes(static_cast<double>(limit), ByteUnits::Binary);
  if (static_cast<uintmax_t>(info.st_size) > limit)
    throw Error(fmt::format("{}: cannot read: {} bytes, over the {} limit on an input file", path,
                            static_cast<uintmax_t>(info.st_size), most));
  std::string text;
  text.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "read", errno);
    }
    if (n == 0) break;
    // A file that grows while it is read, or whose size stat does not know (/proc), is held to the
    // same limit.
    if (static_cast<size_t>(n) > limit - text.size())
      throw Error(fmt::format("{}: cannot read: over the {} limit on an input file", path, most));
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

namespace {

// Makes a rename durable: the directory entry reaches the disk, not only the file's data.
void sync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string directory = parent.empty() ? std::string(".") : parent.string();
  FileDescriptor fd(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno(path, "write", errno);
  if (::fsync(fd.get()) != 0) fail_errno(path, "write", errno);
}

}  // namespace

void write_text_file(const std::string& path, const std::string& text) {
  // Readers see the old file or the new one, never a half-written one; and once this returns, the new
  // one survives a power loss: the data is synced before the rename makes it visible, and the
  // directory after it. A checkpoint's `latest` written after its files can then never name files
  // whose data did not reach the disk.
  const std::string temporary = path + ".tmp";
  FileDescriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666));
  if (fd.get() < 0) fail_errno(path, "write", errno);
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::unlink(temporary.c_str());
      fail_errno(path, "write", error);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0 || ::close(fd.release()) != 0 || ::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail_errno(path, "write", error);
  }
  sync_directory_of(path);
}

}  // namespace flexpipe
