// Checkpoint files that are not ours, or are damaged, are refused with the file's name and the input
// quoted printably.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "error_text.h"
#include "session/checkpoint.h"

namespace flexpipe::runtime {
namespace {

std::string written(const std::string& name, const std::string& bytes) {
  const auto path = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".bin");
  std::ofstream(path, std::ios::binary) << bytes;
  return path.string();
}

TEST(Checkpoint, ABinaryFirstLineIsQuotedPrintably) {
  const std::string path = written("binary_magic", std::string("\x7f"
                                                               "ELF\x02\x01\0\0\n",
                                                               9));
  EXPECT_EQ(test::error_text([&] { read_rank_checkpoint(path); }),
            path + ": not a FlexPipe checkpoint (first line '\\x7FELF\\x02\\x01\\x00\\x00')");
  std::filesystem::remove(path);
}

TEST(Checkpoint, AHeaderThatIsNotJsonIsQuotedPrintably) {
  const std::string path = written("binary_header", std::string("flexpipe-checkpoint 1\n{\"step\": \x01\0}\n", 35));
  const std::string error = test::error_text([&] { read_rank_checkpoint(path); });
  EXPECT_TRUE(error.starts_with(path + ":2: malformed checkpoint header: ")) << error;
  EXPECT_EQ(error.find('\x01'), std::string::npos) << error;
  EXPECT_EQ(error.find('\0'), std::string::npos) << error;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace flexpipe::runtime
