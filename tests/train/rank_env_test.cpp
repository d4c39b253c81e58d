// rank_env_from_environment: the torchrun variables, Slurm's (with its compressed host lists), their
// defaults, and a message naming the variable for every way one can be missing or malformed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "error_text.h"
#include "flexpipe/support/error.h"
#include "flexpipe/train/rank_env.h"
#include "flexpipe/train/slurm_nodelist.h"

namespace flexpipe::runtime {
namespace {

class RankEnvironment : public ::testing::Test {
 protected:
  static constexpr const char* kNames[] = {"RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "GROUP_RANK",
                                           "TORCHELASTIC_USE_AGENT_STORE",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_LOCALID",
                                           "SLURM_NODEID",
                                           "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE",
                                           "SLURM_JOB_NODELIST",
                                           "SLURM_JOB_ID"};
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

TEST_F(RankEnvironment, TorchrunsNodeAndAgentStoreAreRead) {
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("RANK", "3", 1);
  ::setenv("LOCAL_RANK", "1", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  ::setenv("GROUP_RANK", "1", 1);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  RankEnv env = rank_env_from_environment();
  EXPECT_EQ(env.node_rank, 1);
  EXPECT_TRUE(env.agent_store);
  EXPECT_EQ(env.launcher, "torchrun");
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  EXPECT_FALSE(rank_env_from_environment().agent_store);
  ::setenv("TORCHELASTIC_USE_AGENT_STORE", "1", 1);
  EXPECT_EQ(error(), "environment variable TORCHELASTIC_USE_AGENT_STORE='1' is neither True nor False");
}

// What srun sets for task 5 of 6 on the third of three nodes (2 tasks each), with the port derived from
// the job id and the master the first host of the compressed node list.
TEST_F(RankEnvironment, SlurmVariablesWhenWorldSizeIsUnset) {
  ::setenv("SLURM_PROCID", "5", 1);
  ::setenv("SLURM_NTASKS", "6", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
  ::setenv("SLURM_NODEID", "2", 1);
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "2(x3)", 1);
  ::setenv("SLURM_JOB_NODELIST", "gpu[07-09],login1", 1);
  ::setenv("SLURM_JOB_ID", "123456", 1);
  EXPECT_TRUE(in_launched_job());
  RankEnv env = rank_env_from_environment();
  EXPECT_EQ(env.launcher, "slurm");
  EXPECT_EQ(env.rank, 5);
  EXPECT_EQ(env.world_size, 6);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_EQ(env.local_world_size, 2);
  EXPECT_EQ(env.node_rank, 2);
  EXPECT_EQ(env.master_addr, "gpu07");
  EXPECT_EQ(env.master_port, 23456);
  EXPECT_FALSE(env.agent_store);
  // A batch script's own MASTER_ADDR and MASTER_PORT win.
  ::setenv("MASTER_ADDR", "10.1.1.1", 1);
  ::setenv("MASTER_PORT", "29400", 1);
  env = rank_env_from_environment();
  EXPECT_EQ(env.master_addr, "10.1.1.1");
  EXPECT_EQ(env.master_port, 29400);
  // torchrun's variables, when set, win over Slurm's (torchrun started under srun).
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("RANK", "1", 1);
  EXPECT_EQ(rank_env_from_environment().launcher, "torchrun");
}

// An interactive `srun --pty bash` is one task: flexpipe train there launches its own ranks.
TEST_F(RankEnvironment, OneSlurmTaskIsNoJobOfRanks) {
  ::setenv("SLURM_PROCID", "0", 1);
  ::setenv("SLURM_NTASKS", "1", 1);
  EXPECT_FALSE(in_launched_job());
  const RankEnv env = rank_env_from_environment();
  EXPECT_EQ(env.launcher, "none");
  EXPECT_EQ(env.world_size, 1);
}

TEST_F(RankEnvironment, SlurmNamesWhatIsMissingOrMalformed) {
  ::setenv("SLURM_PROCID", "1", 1);
  ::setenv("SLURM_NTASKS", "2", 1);
  EXPECT_EQ(error(), "environment variable SLURM_LOCALID is missing (required when SLURM_NTASKS=2)");
  ::setenv("SLURM_LOCALID", "1", 1);
  EXPECT_EQ(error(),
            "neither MASTER_ADDR nor SLURM_JOB_NODELIST is set (one is required when SLURM_NTASKS=2): the ranks "
            "cannot know where rank 0 is");
  ::setenv("SLURM_JOB_NODELIST", "node[01-02", 1);
  EXPECT_EQ(error(),
            "environment variable SLURM_JOB_NODELIST='node[01-02' is not in Slurm's compressed list form: a '[' "
            "without its ']'");
  ::setenv("SLURM_JOB_NODELIST", "node[01-02]", 1);
  EXPECT_EQ(error(), "neither MASTER_PORT nor SLURM_JOB_ID is set (one is required when SLURM_NTASKS=2)");
  ::setenv("SLURM_JOB_ID", "7", 1);
  ::setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)", 1);
  EXPECT_EQ(error(), "environment variable SLURM_LOCALID=1 is out of range for the 1 tasks of node 0");
  ::setenv("SLURM_NODEID", "2", 1);
  EXPECT_EQ(error(), "environment variable SLURM_STEP_TASKS_PER_NODE='1(x2)' lists 2 nodes, but SLURM_NODEID is 2");
  ::setenv("SLURM_PROCID", "2", 1);
  EXPECT_EQ(error(), "environment variable SLURM_PROCID=2 is out of range (0..1)");
}

TEST(SlurmNodelist, ExpandsTheCompressedForm) {
  using List = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("node01", "V"), List{"node01"});
  EXPECT_EQ(expand_slurm_nodelist("node[01-04,07]", "V"), (List{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_slurm_nodelist("a[8-10],b,c[1]", "V"), (List{"a8", "a9", "a10", "b", "c1"}));
  EXPECT_EQ(expand_slurm_nodelist("n[098-100]", "V"), (List{"n098", "n099", "n100"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]-n[1-2]", "V"), (List{"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1", "V"), (std::vector<int>{2, 2, 2, 1}));
  // A few dozen bytes must not expand to billions of names: at most 100,000 hosts or nodes, however
  // the ranges combine.
  EXPECT_EQ(test::error_text([] { expand_slurm_nodelist("r[1-1000]-n[1-1000]", "V"); }),
            "environment variable V='r[1-1000]-n[1-1000]' is not in Slurm's compressed list form: it stands for "
            "more than 100000 hosts");
  EXPECT_EQ(test::error_text([] { expand_slurm_nodelist("n[0-60000,0-60000]", "V"); }),
            "environment variable V='n[0-60000,0-60000]' is not in Slurm's compressed list form: it stands for more "
            "than 100000 hosts");
  EXPECT_EQ(test::error_text([] { expand_slurm_nodelist("a[0-60000],b[0-60000]", "V"); }),
            "environment variable V='a[0-60000],b[0-60000]' is not in Slurm's compressed list form: it stands for "
            "more than 100000 hosts");
  EXPECT_EQ(expand_slurm_nodelist("n[1-99999]", "V").size(), 99999u);
  EXPECT_EQ(test::error_text([] { expand_slurm_tasks_per_node("2(x-3)", "V"); }),
            "environment variable V='2(x-3)' is not in Slurm's compressed list form: '-3' is not a number");
  EXPECT_EQ(test::error_text([] { expand_slurm_tasks_per_node("-2(x3)", "V"); }),
            "environment variable V='-2(x3)' is not in Slurm's compressed list form: '-2' is not a number");
  EXPECT_EQ(test::error_text([] { expand_slurm_tasks_per_node("1(x60000),2(x60000)", "V"); }),
            "environment variable V='1(x60000),2(x60000)' is not in Slurm's compressed list form: it stands for more "
            "than 100000 nodes");
  for (const std::string bad : {"", "a,,b", "a[2-1]", "a[x]", "a]", "a[1-2]]", "a[[1]]"}) {
    try {
      expand_slurm_nodelist(bad, "SLURM_JOB_NODELIST");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_TRUE(std::string(e.what()).starts_with("environment variable SLURM_JOB_NODELIST='" + bad + "'"))
          << e.what();
    }
  }
}

}  // namespace
}  // namespace flexpipe::runtime
