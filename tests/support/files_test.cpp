// write_text_file is atomic and durable; read_text_file reads what it wrote. fsync is interposed in
// this executable (its definition wins over libc's) to record what was synced, in order, before
// calling the real one.
#include <dlfcn.h>
#include <unistd.h>

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

}  // namespace
}  // namespace flexpipe
