// Runs the real flexpipe binary from a test: each test gets its own scratch directory, and a run
// returns the exit code with everything written to stdout and stderr.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace flexpipe::test {

struct Outcome {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class CliHarness : public ::testing::Test {
 protected:
  // Each suite names its scratch directories with its own prefix, so that suites never share one.
  explicit CliHarness(std::string directory_prefix) : directory_prefix_(std::move(directory_prefix)) {}

  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (directory_prefix_ + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // `environment`: NAME=VALUE words set for this run only.
  Outcome flexpipe(const std::string& args, const std::string& environment = "") {
    const std::filesystem::path out = dir_ / "stdout", err = dir_ / "stderr";
    const std::string command = (environment.empty() ? "" : "env " + environment + " ") + "timeout 60 " +
                                FLEXPIPE_BINARY + " " + args + " >" + out.string() + " 2>" + err.string() +
                                " </dev/null";
    const int status = std::system(command.c_str());
    Outcome run;
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = slurp(out);
    run.err = slurp(err);
    return run;
  }

  // Each command exits with `exit_code` and prints exactly its message on stderr. With
  // `option_error`, the message is an option's, reported while the command line is read, as one line:
  // "error: MESSAGE (see flexpipe SUBCOMMAND --help)".
  void expect_refused(const std::vector<std::pair<std::string, std::string>>& cases, int exit_code = 2,
                      bool option_error = false) {
    for (const auto& [args, message] : cases) {
      const Outcome run = flexpipe(args);
      EXPECT_EQ(run.exit_code, exit_code) << args;
      const std::string subcommand = args.substr(0, args.find(' '));
      EXPECT_EQ(run.err, option_error ? "error: " + message + " (see flexpipe " + subcommand + " --help)\n" : message)
          << args;
    }
  }

  std::filesystem::path write(const std::string& name, const std::string& text) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path) << text;
    return path;
  }

  std::filesystem::path dir_;

 private:
  std::string directory_prefix_;
};

}  // namespace flexpipe::test
