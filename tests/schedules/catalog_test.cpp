// The programs are the catalog: every program in examples/schedules is a built-in, listed once,
// with the description, chunks and parameter checks it states, and each has its C++ oracle; a
// program that states no description, or lacks p or m, is refused with a located error.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "flexpipe/schedules/builtin.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe {
namespace {

const std::string kLibrary = FLEXPIPE_TEST_DATA "/../../examples/schedules/";

std::string error_of(auto&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// The programs in examples/schedules by name, each with its text.
std::map<std::string, std::string> programs_on_disk() {
  std::map<std::string, std::string> programs;
  for (const auto& entry : std::filesystem::directory_iterator(kLibrary))
    if (entry.path().extension() == ".fps")
      programs[entry.path().stem().string()] = read_text_file(entry.path().string());
  return programs;
}

// What a program's `description "..."` line says, read without the language.
std::string stated_description(const std::string& text) {
  const std::string keyword = "description \"";
  const size_t at = text.rfind(keyword, 0) == 0 ? 0 : text.find("\n" + keyword);
  if (at == std::string::npos) return "";
  const size_t begin = text.find('"', at) + 1;
  return text.substr(begin, text.find('"', begin) - begin);
}

TEST(Catalog, ListsExactlyTheProgramsInExamplesSchedules) {
  const auto programs = programs_on_disk();
  std::set<std::string> listed;
  for (const BuiltinSchedule& builtin : builtin_schedules()) listed.insert(builtin.name);
  EXPECT_EQ(listed.size(), builtin_schedules().size()) << "a program listed twice";
  std::set<std::string> on_disk;
  for (const auto& [name, text] : programs) on_disk.insert(name);
  ASSERT_FALSE(on_disk.empty()) << kLibrary;
  EXPECT_EQ(listed, on_disk);
}

TEST(Catalog, EachBuiltinStatesWhatItsProgramStates) {
  for (const auto& [name, text] : programs_on_disk()) {
    const BuiltinSchedule* builtin = find_builtin(name);
    ASSERT_NE(builtin, nullptr) << name;
    EXPECT_FALSE(stated_description(text).empty()) << name;
    EXPECT_EQ(builtin->description, stated_description(text)) << name;
    EXPECT_EQ(builtin->program, text) << name;
    EXPECT_EQ(builtin->chunks_adjustable, text.find("\nparam v = ") != std::string::npos) << name;
  }
}

TEST(Catalog, EveryBuiltinHasItsOracle) {
  for (const BuiltinSchedule& builtin : builtin_schedules())
    EXPECT_EQ(make_builtin(builtin.name, {4, 0, 0}).device_actions.size(), 4u) << builtin.name;
}

const char* kBody =
    "devices p\nmicrobatches m\nstages p\nfor d in 0..p {\n  repeat m { F(d) }\n  repeat m { B(d) }\n}\n";

TEST(Catalog, ReadsAProgramsMetadata) {
  const std::string text =
      std::string("description \"one pass each way\"\nparam p = 4 where p >= 1 \"needs a device\"\n") +
      "param m = 3 * p where m >= 2 * p \"needs m >= 2p = {2 * p}\"\n" + kBody;
  const BuiltinSchedule builtin = read_builtin("mine", text);
  EXPECT_EQ(builtin.name, "mine");
  EXPECT_EQ(builtin.description, "one pass each way");
  EXPECT_EQ(builtin.default_chunks, 1);
  EXPECT_FALSE(builtin.chunks_adjustable);
  EXPECT_EQ(builtin.check({3, 5, 1}), "needs m >= 2p = 6");
  EXPECT_EQ(builtin.check({3, 6, 1}), "");
  EXPECT_EQ(builtin.check({3, 0, 1}), "");  // m = 0: the program's default, 3p
}

TEST(Catalog, RefusesAProgramWithoutADescriptionOrWithoutPAndM) {
  EXPECT_EQ(error_of([] { read_builtin("bare", std::string("param p = 4\nparam m = 2 * p\n") + kBody); }),
            "bare.fps:1:1: error: a built-in's program states its description, the line `flexpipe schedules` "
            "shows\n  hint: write description \"...\" at the top");
  EXPECT_EQ(error_of([] { read_builtin("no-m", std::string("description \"d\"\nparam p = 4\nlet m = 2\n") + kBody); }),
            "no-m.fps:1:1: error: a built-in's program declares `param m`, which every built-in takes");
}

}  // namespace
}  // namespace flexpipe
