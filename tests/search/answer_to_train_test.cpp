// Which answer a run trains: the search's own schedule only for a predicted gain of at least the
// margin over the fastest built-in that runs and fits.
#include <gtest/gtest.h>

#include "flexpipe/search/search.h"

namespace flexpipe {
namespace {

ScheduleCandidateReport candidate(const std::string& name, double makespan, bool fits = true,
                                  const std::string& skipped = "") {
  ScheduleCandidateReport c;
  c.name = name;
  c.makespan = makespan;
  c.fits = fits;
  c.skipped = skipped;
  return c;
}

// The search's program at `best`, against DualPipe at 100, a faster ZB-V that does not fit and a
// faster 1F1B that does not run at these parameters.
SearchResult searched(double best) {
  SearchResult r;
  r.found = true;
  r.best = candidate("search", best);
  r.builtins = {candidate("1f1b", 90, true, "needs m >= p"), candidate("zb-v", 95, false), candidate("dualpipe", 100),
                candidate("gpipe", 120)};
  return r;
}

TEST(AnswerToTrain, TheFastestBuiltInIsTheFastestThatRunsAndFits) {
  const SearchResult r = searched(50);
  ASSERT_NE(fastest_builtin(r), nullptr);
  EXPECT_EQ(fastest_builtin(r)->name, "dualpipe");
  SearchResult none = r;
  none.builtins = {candidate("zb-v", 95, false)};
  EXPECT_EQ(fastest_builtin(none), nullptr);
}

// A built-in outside the families searched (DualPipe with `bidirectional` off, as for a model with
// BatchNorm) is neither the answer nor what the answer is compared with: GPipe is.
TEST(AnswerToTrain, ABuiltInOutsideTheSearchedPlacementsIsNotTrained) {
  SearchResult r = searched(96);
  r.builtins[2].placement_searched = false;
  ASSERT_NE(fastest_builtin(r), nullptr);
  EXPECT_EQ(fastest_builtin(r)->name, "gpipe");
  EXPECT_EQ(answer_to_train(r, 0.05).name, "search");  // 20% faster than GPipe
}

TEST(AnswerToTrain, TheSearchsProgramOnlyForAGainOfAtLeastTheMargin) {
  EXPECT_EQ(answer_to_train(searched(96), 0.05).name, "dualpipe");  // 4% faster: a tie
  EXPECT_EQ(answer_to_train(searched(95), 0.05).name, "search");    // 5%: exactly the margin
  EXPECT_EQ(answer_to_train(searched(80), 0.05).name, "search");
  EXPECT_EQ(answer_to_train(searched(99.9), 0).name, "search");  // no margin: whatever is predicted fastest
  EXPECT_EQ(answer_to_train(searched(1), 1).name, "dualpipe");   // a margin of 1: always the built-in
}

TEST(AnswerToTrain, ABuiltInAnswerOrNoBuiltInToCompareWithIsKept) {
  SearchResult builtin_best = searched(100);
  builtin_best.best = candidate("dualpipe", 100);
  EXPECT_EQ(&answer_to_train(builtin_best, 0.05), &builtin_best.best);
  SearchResult alone = searched(99);
  alone.builtins = {candidate("zb-v", 95, false)};
  EXPECT_EQ(answer_to_train(alone, 0.05).name, "search");
}

TEST(AnswerToTrain, RanksThatOutnumberTheCoresTrainTheFastestBuiltInUnlessAMarginIsGiven) {
  EXPECT_EQ(training_margin(0.05, false, 2, 2), 0.05);  // a core each
  EXPECT_EQ(training_margin(0.05, false, 4, 2), 1.0);   // two ranks a core: the built-in
  EXPECT_EQ(answer_to_train(searched(50), training_margin(0.05, false, 4, 2)).name, "dualpipe");
  EXPECT_EQ(training_margin(0.05, true, 4, 2), 0.05);  // --auto-margin given: the user's
  EXPECT_EQ(training_margin(0, true, 4, 2), 0.0);
  EXPECT_EQ(training_margin(0.05, false, 64, 0), 0.05);  // cores unknown
}

}  // namespace
}  // namespace flexpipe
