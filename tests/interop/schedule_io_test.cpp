// Tests of schedule files on disk: atomic writes, errors naming the path, what looks like a file.
#include "flexpipe/interop/schedule_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "flexpipe/interop/schedule_json.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(FLEXPIPE_TEST_DATA) + "/pytorch/";

// A fresh directory per test, removed afterwards.
class ScheduleIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("flexpipe_io_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

Schedule small_schedule() {
  Schedule s = make_schedule("small", 2, 1, loop_placement(2, 2));
  s.device_actions[0] = {Action::make(ActionKind::F, 0, 0), Action::make(ActionKind::B, 0, 0)};
  s.device_actions[1] = {Action::make(ActionKind::F, 1, 0), Action::make(ActionKind::B, 1, 0)};
  return s;
}

TEST_F(ScheduleIo, WriteReplacesTheFileAndLeavesNoTemporary) {
  const std::string file = path("a.txt");
  write_text_file(file, "first");
  write_text_file(file, "second\n");
  EXPECT_EQ(read_text_file(file), "second\n");
  EXPECT_FALSE(fs::exists(file + ".tmp"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(ScheduleIo, ReadAndWriteErrorsNameThePathAndTheReason) {
  EXPECT_EQ(error_of([&] { read_text_file(path("missing.csv")); }),
            path("missing.csv") + ": cannot read: No such file or directory");
  EXPECT_EQ(error_of([&] { read_text_file(dir_.string()); }),
            dir_.string() + ": cannot read: is a directory, not a regular file");
  EXPECT_EQ(error_of([&] { write_text_file(path("no/such/dir.csv"), "x"); }),
            path("no/such/dir.csv") + ": cannot write: No such file or directory");
}

TEST(ScheduleIoSpec, LooksLikeFile) {
  EXPECT_FALSE(looks_like_file("1f1b"));
  EXPECT_FALSE(looks_like_file("zb-h1"));
  EXPECT_FALSE(looks_like_file("interleaved_1f1b"));
  EXPECT_TRUE(looks_like_file("schedule.csv"));
  EXPECT_TRUE(looks_like_file("my.schedule"));
  EXPECT_TRUE(looks_like_file("dir/schedule"));
  EXPECT_TRUE(looks_like_file("./1f1b"));
}

// The one rule every command applies to a schedule argument (docs/architecture.md).
TEST(ScheduleIoSpec, SourceIsANameAutoOrAFileByExtension) {
  EXPECT_EQ(schedule_source("1f1b"), ScheduleSource::Builtin);
  EXPECT_EQ(schedule_source("interleaved_1f1b"), ScheduleSource::Builtin);
  EXPECT_EQ(schedule_source("auto"), ScheduleSource::Auto);
  EXPECT_EQ(schedule_source("dir/auto"), ScheduleSource::OtherFile);  // a path, even with a built-in's name
  EXPECT_EQ(schedule_source("./1f1b"), ScheduleSource::OtherFile);
  EXPECT_EQ(schedule_source("a.fps"), ScheduleSource::Program);
  EXPECT_EQ(schedule_source("dir/A.FPS"), ScheduleSource::Program);  // the extension in any case
  EXPECT_EQ(schedule_source("s.json"), ScheduleSource::ScheduleJson);
  EXPECT_EQ(schedule_source("s.csv"), ScheduleSource::PytorchCsv);
  EXPECT_EQ(schedule_source("my.schedule"), ScheduleSource::OtherFile);
  for (const char* spec : {"1f1b", "auto"}) EXPECT_FALSE(is_schedule_file(schedule_source(spec))) << spec;
  for (const char* spec : {"a.fps", "s.json", "s.csv", "dir/x"})
    EXPECT_TRUE(is_schedule_file(schedule_source(spec))) << spec;
}

TEST_F(ScheduleIo, AFileOfAnotherFormatOrAMissingOneIsNamedInTheError) {
  EXPECT_EQ(error_of([&] { load_schedule(path("s.txt"), {}); }),
            path("s.txt") + ": cannot load a schedule from '.txt' (expected .fps, .csv for PyTorch's CSV or .json)");
  EXPECT_EQ(error_of([&] { load_schedule(path("missing.fps"), {}); }),
            path("missing.fps") + ": cannot read: No such file or directory");
  EXPECT_EQ(error_of([&] { load_schedule(path("missing.json"), {}); }),
            path("missing.json") + ": cannot read: No such file or directory");
}

TEST_F(ScheduleIo, LoadsByExtensionOrBuiltinName) {
  const Schedule csv = load_schedule(kData + "handwritten_1f1b_2rank_4mb.csv", {});
  EXPECT_EQ(csv.name, "handwritten_1f1b_2rank_4mb");
  EXPECT_EQ(csv.num_microbatches, 4);

  const std::string json_file = path("s.JSON");
  write_text_file(json_file, write_schedule_json(csv));
  EXPECT_EQ(load_schedule(json_file, {}), csv);

  const Schedule builtin = load_schedule("1f1b", {3, 6, 0});
  EXPECT_EQ(builtin, make_builtin("1f1b", {3, 6, 0}));
  EXPECT_EQ(builtin.num_devices, 3);
}

TEST_F(ScheduleIo, LoadPassesTheCsvLettering) {
  const std::string legacy = kData + "legacy/loop_zb_2rank_4stage_compute.csv";
  EXPECT_EQ(load_schedule(legacy, {}, {CsvLettering::Legacy}), load_schedule(legacy, {}));
  EXPECT_NE(load_schedule(legacy, {}, {CsvLettering::Current}), load_schedule(legacy, {}));
}

TEST_F(ScheduleIo, LoadErrors) {
  EXPECT_EQ(error_of([&] { load_schedule(path("s.txt"), {}); }),
            path("s.txt") + ": cannot load a schedule from '.txt' (expected .fps, .csv for PyTorch's CSV or .json)");
  EXPECT_EQ(error_of([&] { load_schedule(path("plain"), {}); }),
            path("plain") +
                ": cannot load a schedule from a file without extension (expected .fps, .csv for PyTorch's CSV "
                "or .json)");
  EXPECT_EQ(error_of([&] { load_schedule(path("gone.json"), {}); }),
            path("gone.json") + ": cannot read: No such file or directory");
  EXPECT_EQ(error_of([] { load_schedule("nosuchschedule", {}); }).substr(0, 34), "unknown schedule 'nosuchschedule' ");
}

TEST_F(ScheduleIo, SavesByExtension) {
  const Schedule s = small_schedule();
  save_schedule(s, path("s.csv"));
  EXPECT_EQ(read_text_file(path("s.csv")), "0F0,0B0\n1F0,1B0\n");
  save_schedule(s, path("s.json"));
  EXPECT_EQ(read_text_file(path("s.json")), write_schedule_json(s));
  Schedule back = load_schedule(path("s.csv"), {});
  back.name = s.name;
  EXPECT_EQ(back, s);
}

TEST_F(ScheduleIo, SaveErrorsWriteNothing) {
  Schedule s = small_schedule();
  EXPECT_EQ(error_of([&] { save_schedule(s, path("s.svg")); }),
            path("s.svg") + ": cannot save a schedule as '.svg' (expected .fps, .csv for PyTorch's CSV or .json)");
  s.device_actions[1].push_back(Action::make(ActionKind::Opt, 1));
  EXPECT_EQ(error_of([&] { save_schedule(s, path("s.csv")); }),
            "device 1 #2 1OPT: PyTorch's schedule CSV has no OPT action (save it as .json)");
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace flexpipe
