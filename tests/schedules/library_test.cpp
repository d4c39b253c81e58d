// Built-in names are served from the embedded library programs; the C++ generators are the oracle.
#include "flexpipe/schedules/library.h"

#include <gtest/gtest.h>

#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/support/error.h"

namespace flexpipe {
namespace {

TEST(LibraryPrograms, EveryBuiltinHasItsProgramEmbedded) {
  ASSERT_EQ(library_programs().size(), builtin_schedules().size());
  for (const BuiltinSchedule& builtin : builtin_schedules()) {
    const LibraryProgram* program = find_library_program(builtin.name);
    ASSERT_NE(program, nullptr) << builtin.name;
    EXPECT_NE(program->text.find("param p"), std::string_view::npos) << builtin.name;
  }
  EXPECT_EQ(find_library_program("nope"), nullptr);
  EXPECT_EQ(find_library_program("ZB_H1"), find_library_program("zb-h1"));
}

TEST(LibraryPrograms, NamesLoadThroughTheProgramsAndEqualTheGenerators) {
  for (const BuiltinSchedule& builtin : builtin_schedules()) {
    for (int p : {2, 4}) {
      ScheduleParams params{p, 4 * p, 0};
      const Schedule expected = make_builtin(builtin.name, params);
      EXPECT_EQ(load_schedule(builtin.name, params), expected) << builtin.name << " p=" << p;
      const CompiledProgram compiled = compile_builtin(builtin.name, params);
      EXPECT_EQ(compiled.map.origin, builtin.name + ".fps");
      EXPECT_GT(compiled.map.at(0, 0).line, 0) << builtin.name;
    }
  }
  EXPECT_EQ(load_schedule("interleaved-1f1b", {4, 8, 3}), make_builtin("interleaved-1f1b", {4, 8, 3}));
}

TEST(LibraryPrograms, ParametersAreCheckedWithTheGeneratorsMessages) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([] {
              compile_builtin("interleaved-1f1b", {4, 6, 2});
            }),
            "interleaved-1f1b with p=4, m=6, v=2: needs m to be a multiple of p");
  EXPECT_EQ(message([] { compile_builtin("zb-v", {4, 8, 3}); }), "zb-v: has exactly 2 chunks per device (got v=3)");
  EXPECT_EQ(message([] { compile_builtin("nope", {4, 8, 0}); }).rfind("unknown schedule 'nope'", 0), 0u);
}

TEST(LibraryPrograms, LibraryScheduleServesTheCompiledProgramOncePerParameters) {
  const Schedule compiled = compile_builtin("zb-h1", {4, 8, 0}).schedule;
  EXPECT_EQ(library_schedule("zb-h1", {4, 8, 0}), compiled);
  EXPECT_EQ(library_schedule("zb-h1", {4, 8, 0}), compiled);  // the kept copy
  EXPECT_EQ(library_schedule("ZB_H1", {4, 0, 0}), compiled);  // m = 0 is m = 2p
  EXPECT_EQ(library_schedule("interleaved-1f1b", {4, 8, 3}), compile_builtin("interleaved-1f1b", {4, 8, 3}).schedule);
  EXPECT_THROW(library_schedule("interleaved-1f1b", {4, 6, 2}), Error);
  EXPECT_EQ(library_schedule("1f1b", {4, 2, 0}), make_builtin("1f1b", {4, 2, 0}));  // m < p: warm-up bounded by m
}

}  // namespace
}  // namespace flexpipe
