#include "flexpipe/core/schedule_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "flexpipe/core/error.h"
#include "flexpipe/core/schedule_json.h"
#include "flexpipe/lang/library.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/lang/writer.h"

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

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

std::string describe_extension(const std::string& ext) {
  return ext.empty() ? std::string("a file without extension") : fmt::format("'{}'", ext);
}

}  // namespace

std::string read_text_file(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail_errno(path, "read", errno);
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) fail_errno(path, "read", errno);
  if (S_ISDIR(info.st_mode)) fail_errno(path, "read", EISDIR);
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail_errno(path, "read", errno);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

void write_text_file(const std::string& path, const std::string& text) {
  // Readers see the old file or the new one, never a half-written one.
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
  if (::close(fd.release()) != 0 || ::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail_errno(path, "write", error);
  }
}

bool looks_like_file(const std::string& spec) {
  return spec.find('/') != std::string::npos || spec.find('\\') != std::string::npos ||
         std::filesystem::path(spec).has_extension();
}

Schedule load_schedule(const std::string& spec, const ScheduleParams& params, const CsvReadOptions& csv) {
  if (!looks_like_file(spec)) return compile_builtin(spec, params).schedule;
  const std::string ext = lower_extension(spec);
  if (ext == ".csv") return load_pytorch_csv(spec, csv);
  if (ext == ".json") return parse_schedule_json(read_text_file(spec), spec);
  if (ext == ".fps") return load_program(spec).schedule;
  throw Error(fmt::format("{}: cannot load a schedule from {} (expected .fps, .csv for PyTorch's CSV or .json)", spec,
                          describe_extension(ext)));
}

void save_schedule(const Schedule& schedule, const std::string& path) {
  const std::string ext = lower_extension(path);
  if (ext == ".csv") return write_text_file(path, write_pytorch_csv(schedule));
  if (ext == ".json") return write_text_file(path, write_schedule_json(schedule));
  if (ext == ".fps") return write_text_file(path, write_program(schedule));
  throw Error(fmt::format("{}: cannot save a schedule as {} (expected .fps, .csv for PyTorch's CSV or .json)", path,
                          describe_extension(ext)));
}

}  // namespace flexpipe
