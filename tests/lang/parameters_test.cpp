// Parameter enumeration: names, values, the bounds `where` conditions state, and the conditions
// themselves, as the automated scheduler needs them to sweep a program.
#include <gtest/gtest.h>

#include "flexpipe/lang/parameters.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

const std::string kProgram =
    "param p = 4 where p >= 2 \"needs at least 2 devices\"\n"
    "param v = 2 where 1 <= v and v < 5 \"v from 1 to 4\"\n"
    "param m = 2 * p where m >= p \"needs m >= p\" where m % p == 0 \"needs m a multiple of p\"\n"
    "devices p\nmicrobatches m\nstages p * v\n";

TEST(Parameters, NamesValuesBoundsAndConditions) {
  const std::vector<ProgramParameter> params = program_parameters(kProgram, "x.fps");
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0].name, "p");
  EXPECT_EQ(params[0].value, 4);
  EXPECT_EQ(params[0].min, 2);
  EXPECT_EQ(params[0].max, std::nullopt);
  EXPECT_EQ(params[0].conditions, (std::vector<std::string>{"p >= 2: needs at least 2 devices"}));
  EXPECT_EQ(params[0].location, (SourceLocation{1, 1}));
  EXPECT_EQ(params[1].min, 1);
  EXPECT_EQ(params[1].max, 4);
  EXPECT_EQ(params[2].name, "m");
  EXPECT_EQ(params[2].value, 8);
  EXPECT_EQ(params[2].min, 4);  // m >= p, with p = 4
  EXPECT_EQ(params[2].max, std::nullopt);
  EXPECT_EQ(params[2].conditions,
            (std::vector<std::string>{"m >= p: needs m >= p", "m % p == 0: needs m a multiple of p"}));
  EXPECT_TRUE(params[2].satisfied);
}

TEST(Parameters, DefinesMoveDefaultsAndDependentBounds) {
  const std::vector<ProgramParameter> params = program_parameters(kProgram, "x.fps", {{"p", 6}, {"m", 9}});
  EXPECT_EQ(params[0].value, 6);
  EXPECT_EQ(params[2].value, 9);
  EXPECT_EQ(params[2].min, 6);
  EXPECT_FALSE(params[2].satisfied);  // 9 is not a multiple of 6: reported, not thrown
}

TEST(Parameters, FailuresAreTheFailingConditionsMessagesWithTheirValuesShown) {
  const std::string text =
      "param p = 4\nparam m = 2 * p where m >= 2 * p \"needs m >= 2p = {2 * p}\" where m % 2 == 0 \"needs an even m\"\n"
      "devices p\nmicrobatches m\nstages p\n";
  EXPECT_TRUE(program_parameters(text, "x.fps")[1].failures.empty());
  const std::vector<ProgramParameter> params = program_parameters(text, "x.fps", {{"m", 7}});
  EXPECT_EQ(params[1].failures, (std::vector<std::string>{"needs m >= 2p = 8", "needs an even m"}));
  EXPECT_EQ(params[1].conditions,
            (std::vector<std::string>{"m >= 2 * p: needs m >= 2p = 8", "m % 2 == 0: needs an even m"}));
  EXPECT_FALSE(params[1].satisfied);
}

TEST(Parameters, UnknownDefineAndSyntaxErrorsThrow) {
  EXPECT_THROW(program_parameters(kProgram, "x.fps", {{"q", 1}}), Error);
  EXPECT_THROW(program_parameters("param p = \n", "x.fps"), Error);
}

}  // namespace
}  // namespace flexpipe
