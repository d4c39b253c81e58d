// The schedule library in the language (examples/schedules/*.fps) compiles to exactly the per-device
// lists of the C++ generators, which serve as test oracles, over p in {2,3,4,8}, m from 1 to 4p
// and v in {1,2,3} where v is adjustable. Parameter sets make_builtin refuses (the catalog's checks,
// read from the same program) must fail when the file is compiled too.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "flexpipe/lang/program.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"

namespace flexpipe {
namespace {

const std::string kLibrary = FLEXPIPE_TEST_DATA "/../../examples/schedules/";

class LibraryTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LibraryTest, MatchesGeneratorOverSweep) {
  const std::string name = GetParam();
  const BuiltinSchedule* builtin = find_builtin(name);
  ASSERT_NE(builtin, nullptr);
  int compared = 0, refused = 0;
  for (int p : {2, 3, 4, 8}) {
    for (int m = 1; m <= 4 * p; ++m) {
      std::vector<int> chunks =
          builtin->chunks_adjustable ? std::vector<int>{1, 2, 3} : std::vector<int>{builtin->default_chunks};
      for (int v : chunks) {
        std::map<std::string, int64_t> defines = {{"p", p}, {"m", m}};
        if (builtin->chunks_adjustable) defines["v"] = v;
        const std::string where = fmt::format("{} p={} m={} v={}", name, p, m, v);
        Schedule expected;
        try {
          expected = make_builtin(name, {p, m, v});
        } catch (const Error&) {
          EXPECT_THROW(load_program(kLibrary + name + ".fps", defines), Error) << where;
          ++refused;
          continue;
        }
        const CompiledProgram program = load_program(kLibrary + name + ".fps", defines);
        ASSERT_EQ(program.schedule.device_actions, expected.device_actions) << where;
        ASSERT_EQ(program.schedule, expected) << where;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 0);
  (void)refused;
}

INSTANTIATE_TEST_SUITE_P(Library, LibraryTest,
                         ::testing::Values("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "zb-h2", "zb-v",
                                           "zb-v-adaptive", "dualpipev", "dualpipe", "v-half", "v-min"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace flexpipe
