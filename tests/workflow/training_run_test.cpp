// What train's launched ranks run: the command line with --schedule auto's resolved choice in place,
// built from the choice in one place (rank_command_line).
#include "flexpipe/workflow/training_run.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace flexpipe {
namespace {

using Args = std::vector<std::string>;

TEST(RankCommandLine, WithoutAChoiceTheRanksRunTheCommandLineAsItIs) {
  const Args argv = {"flexpipe", "train", "--schedule", "1f1b", "-p", "2"};
  EXPECT_EQ(rank_command_line(argv, std::nullopt), argv);
}

TEST(RankCommandLine, ABuiltInChoiceReplacesAutoAndAddsThePartition) {
  AutoChoice choice;
  choice.schedule = "zb-h1";
  choice.partition = "ops:10,12";
  EXPECT_EQ(rank_command_line({"flexpipe", "train", "--schedule", "auto", "-p", "2", "--steps", "3"}, choice),
            (Args{"flexpipe", "train", "-p", "2", "--steps", "3", "--schedule", "zb-h1", "--partition", "ops:10,12"}));
  EXPECT_EQ(rank_command_line({"flexpipe", "train", "--schedule=auto", "-m4"}, choice),
            (Args{"flexpipe", "train", "-m4", "--schedule", "zb-h1", "--partition", "ops:10,12"}));
}

TEST(RankCommandLine, TheSearchsProgramFixesItsOwnShape) {
  AutoChoice choice;
  choice.schedule = "/tmp/g.auto-schedule.fps";
  choice.searched_program = true;
  choice.plan = "/tmp/g.auto-plan.json";
  EXPECT_EQ(rank_command_line({"flexpipe", "train", "--model", "g.json", "--schedule", "auto", "-p", "2", "-m4",
                               "--microbatches=8", "--chunks", "2", "--steps", "3"},
                              choice),
            (Args{"flexpipe", "train", "--model", "g.json", "--steps", "3", "--schedule", "/tmp/g.auto-schedule.fps",
                  "--plan", "/tmp/g.auto-plan.json"}));
}

}  // namespace
}  // namespace flexpipe
