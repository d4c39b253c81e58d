// The checkpoint file layout without torch: what is written reads back, and every way a file can be
// wrong is refused before anything is allocated for it.
#include "flexpipe/train/checkpoint_file.h"

#include <gtest/gtest.h>

#include <string>

#include "error_text.h"

namespace flexpipe {
namespace {

CheckpointFile two_tensors() {
  CheckpointFile file{.step = 7,
                      .optimizer_steps = 6,
                      .identity = {{"model", "gpt"}, {"seed", 1}},
                      .tensors = {},
                      .data = {}};
  file.tensors.push_back({.name = "w", .dtype = "float32", .shape = {2, 3}, .offset = 0, .bytes = 24});
  file.tensors.push_back({.name = "step", .dtype = "int64", .shape = {}, .offset = 24, .bytes = 8});
  file.data = std::string(32, '\x01');
  return file;
}

// The file's text with the header's `from` replaced by `to` (the checksum still matches the data).
std::string with(const std::string& from, const std::string& to) {
  std::string bytes = checkpoint_file_bytes(two_tensors());
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return bytes.replace(at, from.size(), to);
}

std::string error_of(const std::string& bytes) {
  return test::error_text([&] { parse_checkpoint_file(bytes, "c.bin"); });
}

TEST(CheckpointFile, ReadsBackWhatItWrites) {
  const CheckpointFile file = two_tensors();
  const std::string bytes = checkpoint_file_bytes(file);
  EXPECT_TRUE(bytes.starts_with("flexpipe-checkpoint 1\n{"));
  EXPECT_EQ(parse_checkpoint_file(bytes, "c.bin"), file);
}

TEST(CheckpointFile, DamagedDataFailsTheChecksum) {
  std::string bytes = checkpoint_file_bytes(two_tensors());
  bytes.back() = '\x02';
  EXPECT_EQ(error_of(bytes), "c.bin: checksum mismatch: the file is damaged or was cut short");
  EXPECT_EQ(error_of(bytes.substr(0, bytes.size() - 4)),
            "c.bin: checksum mismatch: the file is damaged or was cut short");
}

TEST(CheckpointFile, RecordsMustAgreeWithTheirShapeAndTheData) {
  EXPECT_EQ(error_of(with("\"shape\":[2,3]", "\"shape\":[2,4]")), "c.bin: tensor 'w' has 24 bytes for its shape");
  EXPECT_EQ(error_of(with("\"shape\":[2,3]", "\"shape\":[-2,-3]")), "c.bin: tensor 'w' has a negative extent -2");
  EXPECT_EQ(error_of(with("\"shape\":[2,3]", "\"shape\":[4294967296,4294967296,16]")),
            "c.bin: tensor 'w' has more elements than memory can hold");
  EXPECT_EQ(error_of(with("\"offset\":24", "\"offset\":28")), "c.bin: tensor data runs past the end of the file");
  EXPECT_EQ(error_of(with("\"dtype\":\"int64\"", "\"dtype\":\"int4\"")), "c.bin: unknown tensor dtype 'int4'");
  EXPECT_EQ(error_of(with("\"shape\":[2,3]", "\"shape\":[2,3.5]")),
            "c.bin:2: malformed checkpoint header: tensor 'w' has an extent that is not a whole number: 3.5");
}

TEST(CheckpointFile, NumbersAreWholeAndInRange) {
  EXPECT_EQ(error_of(with("\"step\":7", "\"step\":1e20")),
            "c.bin:2: malformed checkpoint header: step must be a whole number from 0 to 2147483647, got 1e+20");
  EXPECT_EQ(error_of(with("\"step\":7", "\"step\":-1")),
            "c.bin:2: malformed checkpoint header: step must be a whole number from 0 to 2147483647, got -1");
  EXPECT_EQ(error_of(with("\"offset\":24", "\"offset\":2.5")),
            "c.bin:2: malformed checkpoint header: offset must be a whole number from 0 to 18446744073709551615, got "
            "2.5");
}

TEST(CheckpointFile, NotOursOrNotJson) {
  EXPECT_EQ(error_of("PK\x03\x04 zip"), "c.bin: not a FlexPipe checkpoint (first line 'PK\\x03\\x04 zip')");
  EXPECT_TRUE(error_of("flexpipe-checkpoint 1\n{oops\n").starts_with("c.bin:2: malformed checkpoint header: "));
  EXPECT_TRUE(error_of(with("\"optimizer_steps\"", "\"optimiser_steps\""))
                  .starts_with("c.bin:2: malformed checkpoint "
                               "header: "));
}

// The header's identity is copied whole: 200 thousand nested lists in it overflowed the stack.
TEST(CheckpointFile, AHeaderNestedBeyondTheLimitIsOneError) {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  EXPECT_EQ(error_of(with("{\"model\":\"gpt\",\"seed\":1}", deep)),
            "c.bin:2:1042: malformed checkpoint header: arrays and objects nest deeper than 1000 levels");
}

}  // namespace
}  // namespace flexpipe
