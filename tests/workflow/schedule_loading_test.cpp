// A schedule argument through the one resolver: a built-in's name, a program file compiled with the
// command's parameters, a schedule file read as it stands, "auto" (train's, no schedule), and a missing
// or unknown file named in the error.
#include "flexpipe/workflow/schedule_loading.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "flexpipe/interop/schedule_json.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"

namespace flexpipe {
namespace {

namespace fs = std::filesystem;

constexpr const char* kGpipe = R"(param p = 4 where p >= 1 "needs at least 1 device"
param m = 2 * p where m >= 1 "needs at least 1 micro-batch"
devices p
microbatches m
stages p

for d in 0..p {
  repeat m { F(d) }
  repeat m { B(d) }
}
)";

class ScheduleLoading : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("flexpipe_schedule_loading_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

std::string error_of(const ScheduleOptions& options) {
  try {
    load_schedule_spec(options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ScheduleOptions spec(const std::string& text, int devices = 0) {
  ScheduleOptions options;
  options.spec = text;
  options.devices = devices;
  return options;
}

TEST_F(ScheduleLoading, ABuiltInsNameCompilesItsProgramWithTheCommandsParameters) {
  const LoadedSchedule loaded = load_schedule_spec(spec("gpipe", 3));
  EXPECT_EQ(loaded.schedule.num_devices, 3);
  EXPECT_EQ(loaded.schedule.num_microbatches, 6);
  EXPECT_TRUE(loaded.program.has_value());
  EXPECT_EQ(load_schedule_spec(spec("gpipe")).schedule.num_devices, 4);  // a built-in's own default
}

TEST_F(ScheduleLoading, AProgramFileCompilesWithTheCommandsParametersAsABuiltInDoes) {
  const std::string file = path("mine.fps");
  write_text_file(file, kGpipe);
  const LoadedSchedule loaded = load_schedule_spec(spec(file, 3));
  EXPECT_TRUE(loaded.program.has_value());
  EXPECT_EQ(loaded.schedule.name, "mine");  // a program file is named after it
  EXPECT_EQ(loaded.schedule.device_actions, load_schedule_spec(spec("gpipe", 3)).schedule.device_actions);
  // The extension in any case is a program's.
  const std::string upper = path("MINE.FPS");
  write_text_file(upper, kGpipe);
  EXPECT_EQ(load_schedule_spec(spec(upper, 3)).schedule.device_actions, loaded.schedule.device_actions);
}

TEST_F(ScheduleLoading, AScheduleFileFixesItsOwnParameters) {
  const std::string file = path("s.json");
  write_text_file(file, write_schedule_json(load_schedule_spec(spec("gpipe", 2)).schedule));
  const LoadedSchedule loaded = load_schedule_spec(spec(file));
  EXPECT_EQ(loaded.schedule.num_devices, 2);
  EXPECT_FALSE(loaded.program.has_value());
  EXPECT_EQ(error_of(spec(file, 4)),
            file + ": -p, -m, -v and -D set a program's parameters; a schedule file fixes them itself");
}

TEST_F(ScheduleLoading, AMissingFileIsNamedWhateverItsFormat) {
  for (const char* name : {"missing.fps", "missing.json", "missing.csv"})
    EXPECT_EQ(error_of(spec(path(name))), path(name) + ": cannot read: No such file or directory") << name;
  EXPECT_EQ(error_of(spec(path("s.txt"))),
            path("s.txt") + ": cannot load a schedule from '.txt' (expected .fps, .csv for PyTorch's CSV or .json)");
}

TEST_F(ScheduleLoading, AutoIsNoScheduleAndAnUnknownNameListsTheBuiltIns) {
  EXPECT_TRUE(error_of(spec("auto")).starts_with("unknown schedule 'auto' (built-in schedules: "))
      << error_of(spec("auto"));
  EXPECT_TRUE(error_of(spec("no-such")).starts_with("unknown schedule 'no-such'"));
}

TEST_F(ScheduleLoading, DevicesComeFromTheCommandForANameWithoutPDefined) {
  EXPECT_TRUE(devices_from_command(spec("1f1b")));
  EXPECT_TRUE(devices_from_command(spec("auto")));
  EXPECT_FALSE(devices_from_command(spec("dir/1f1b")));
  EXPECT_FALSE(devices_from_command(spec("a.fps")));
  ScheduleOptions defined = spec("1f1b");
  defined.defines = {"p=3"};
  EXPECT_FALSE(devices_from_command(defined));
  EXPECT_TRUE(defines_parameter(defined, "p"));
}

}  // namespace
}  // namespace flexpipe
