// write_text_file is atomic and durable; read_text_file reads what it wrote and refuses special files
// and files over the limit. fsync is interposed in this executable (its definition wins over libc's)
// to record what was synced, in order, before calling the real one.
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace {
std::vector<std::string>& synced_paths() {
  static std::vector<std::string> paths;
  return paths;
}
}  // namespace

extern "C" int fsync(int fd) {
  std::error_code error;
  const auto path = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), error);
  synced_paths().push_back(error ? std::string("?") : path.string());
  using Fsync = int (*)(int);
  static const auto real = reinterpret_cast<Fsync>(dlsym(RTLD_NEXT, "fsync"));
  return real(fd);
}

namespace flexpipe {
namespace {

std::filesystem::path fresh_directory() {
  const auto dir =
      std::filesystem::temp_directory_path() / ("flexpipe_files_test_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return std::filesystem::canonical(dir);
}

TEST(WriteTextFile, SyncsTheDataBeforeTheRenameAndTheDirectoryAfterIt) {
  const auto dir = fresh_directory();
  const std::string path = (dir / "latest").string();
  synced_paths().clear();
  write_text_file(path, "7\n");
  // The data is synced while it still has its temporary name, then the directory that holds the
  // new name: a power loss after the call cannot leave `latest` naming data that is not on disk.
  ASSERT_EQ(synced_paths(), (std::vector<std::string>{path + ".tmp", dir.string()}));
  EXPECT_EQ(read_text_file(path), "7\n");
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST(WriteTextFile, ReplacesAnOldFileWhole) {
  const auto dir = fresh_directory();
  const std::string path = (dir / "plan.json").string();
  write_text_file(path, std::string(100'000, 'a'));
  write_text_file(path, "short");
  EXPECT_EQ(read_text_file(path), "short");
  std::filesystem::remove_all(dir);
}

TEST(WriteTextFile, AMissingDirectoryIsOneErrorNamingTheFile) {
  const auto dir = fresh_directory();
  const std::string path = (dir / "missing" / "out.json").string();
  try {
    write_text_file(path, "x");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": cannot write: No such file or directory");
  }
  std::filesystem::remove_all(dir);
}

TEST(ReadTextFile, AMissingFileIsOneErrorNamingTheFile) {
  const auto dir = fresh_directory();
  const std::string path = (dir / "absent.fps").string();
  try {
    read_text_file(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), path + ": cannot read: No such file or directory");
  }
  std::filesystem::remove_all(dir);
}

std::string read_error(const std::string& path, size_t limit = kInputFileLimit) {
  try {
    read_text_file(path, limit);
  } catch (const Error& e) {
    return e.what();
  }
  return "(read)";
}

TEST(ReadTextFile, AFifoIsRefusedAtOnceNotWaitedOn) {
  const auto dir = fresh_directory();
  const std::string path = (dir / "costs.json").string();
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  // Opening a FIFO for reading waits for a writer that never comes: before, this call never returned.
  EXPECT_EQ(read_error(path), path + ": cannot read: is a FIFO, not a regular file");
  EXPECT_EQ(why_not_a_regular_file(path), "is a FIFO, not a regular file");
  std::filesystem::remove_all(dir);
}

TEST(ReadTextFile, DevicesWithoutEndAreRefusedBeforeAByteIsRead) {
  // Before, /dev/zero ran to bad_alloc and /dev/urandom grew without end.
  EXPECT_EQ(read_error("/dev/zero"), "/dev/zero: cannot read: is a character device, not a regular file");
  EXPECT_EQ(read_error("/dev/urandom"), "/dev/urandom: cannot read: is a character device, not a regular file");
  EXPECT_EQ(why_not_a_regular_file("/dev/zero"), "is a character device, not a regular file");
}

TEST(ReadTextFile, ADirectoryAndASocketSayWhatTheyAre) {
  const auto dir = fresh_directory();
  EXPECT_EQ(read_error(dir.string()), dir.string() + ": cannot read: is a directory, not a regular file");
  const std::string socket_path = (dir / "store.sock").string();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof address.sun_path);
  std::strcpy(address.sun_path, socket_path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  EXPECT_EQ(read_error(socket_path), socket_path + ": cannot read: is a socket, not a regular file");
  ::close(fd);
  std::filesystem::remove_all(dir);
}

TEST(ReadTextFile, AFileOverTheLimitIsRefusedWithTheLimit) {
  const auto dir = fresh_directory();
  const std::string path = (dir / "graph.json").string();
  std::ofstream(path) << "0123456789A";
  EXPECT_EQ(read_error(path, 10), path + ": cannot read: 11 bytes, over the 10 B limit on an input file");
  EXPECT_EQ(read_text_file(path, 11), "0123456789A");
  // A file whose size stat does not know is held to the limit while it is read.
  EXPECT_EQ(read_error("/proc/self/status", 10),
            "/proc/self/status: cannot read: over the 10 B limit on an input file");
  EXPECT_EQ(kInputFileLimit, size_t{1} << 30);
  std::filesystem::remove_all(dir);
}

TEST(WhyNotARegularFile, IsEmptyForAFileAndNamesAMissingOne) {
  const auto dir = fresh_directory();
  const std::string path = (dir / "data.txt").string();
  EXPECT_EQ(why_not_a_regular_file(path), "no such file");
  std::ofstream(path) << "abc";
  EXPECT_EQ(why_not_a_regular_file(path), "");
  EXPECT_EQ(why_not_a_regular_file(dir.string()), "is a directory, not a regular file");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace flexpipe
