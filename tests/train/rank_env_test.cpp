// rank_env_from_environment: the torchrun variables, their defaults, and a message naming the
// variable for every way one can be missing or malformed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "flexpipe/support/error.h"
#include "flexpipe/train/rank_env.h"

namespace flexpipe::runtime {
namespace {

class RankEnvironment : public ::testing::Test {
 protected:
  static constexpr const char* kNames[] = {"RANK",        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR", "MASTER_PORT"};
  void SetUp() override {
    for (const char* name : kNames) {
      if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  static std::string error() {
    try {
      rank_env_from_environment();
    } catch (const Error& error) {
      return error.what();
    }
    return "no error";
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
};

TEST_F(RankEnvironment, WithoutWorldSizeIsASingleRankJob) {
  const RankEnv env = rank_env_from_environment();
  EXPECT_EQ(env.rank, 0);
  EXPECT_EQ(env.world_size, 1);
  EXPECT_EQ(env.local_rank, 0);
  EXPECT_EQ(env.local_world_size, 1);
  EXPECT_EQ(env.master_addr, "127.0.0.1");
  EXPECT_EQ(env.master_port, 29500);
}

TEST_F(RankEnvironment, ReadsEveryVariable) {
  ::setenv("WORLD_SIZE", "8", 1);
  ::setenv("RANK", "5", 1);
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("MASTER_ADDR", "10.0.0.7", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  const RankEnv env = rank_env_from_environment();
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 4);
  EXPECT_EQ(env.master_addr, "10.0.0.7");
  EXPECT_EQ(env.master_port, 1234);
}

TEST_F(RankEnvironment, LocalValuesDefaultToGlobalOnes) {
  ::setenv("WORLD_SIZE", "3", 1);
  ::setenv("RANK", "2", 1);
  ::setenv("MASTER_PORT", "29501", 1);
  const RankEnv env = rank_env_from_environment();
  EXPECT_EQ(env.local_rank, 2);
  EXPECT_EQ(env.local_world_size, 3);
}

TEST_F(RankEnvironment, NamesTheMissingOrMalformedVariable) {
  ::setenv("WORLD_SIZE", "2", 1);
  EXPECT_EQ(error(), "environment variable RANK is missing (required when WORLD_SIZE=2)");
  ::setenv("RANK", "1", 1);
  EXPECT_EQ(error(), "environment variable MASTER_PORT is missing (required when WORLD_SIZE=2)");
  ::setenv("MASTER_PORT", "29500x", 1);
  EXPECT_EQ(error(), "environment variable MASTER_PORT='29500x' is not an integer");
  ::setenv("MASTER_PORT", "70000", 1);
  EXPECT_EQ(error(), "environment variable MASTER_PORT=70000 is out of range (1..65535)");
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("RANK", "2", 1);
  EXPECT_EQ(error(), "environment variable RANK=2 is out of range (0..1)");
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "", 1);
  EXPECT_EQ(error(), "environment variable WORLD_SIZE='' is not an integer");
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "", 1);
  EXPECT_EQ(error(), "environment variable MASTER_ADDR is empty");
  ::unsetenv("MASTER_ADDR");
  ::setenv("LOCAL_WORLD_SIZE", "1", 1);
  EXPECT_EQ(error(), "LOCAL_RANK defaults to RANK=1, which is out of range for LOCAL_WORLD_SIZE=1; set LOCAL_RANK");
}

}  // namespace
}  // namespace flexpipe::runtime
