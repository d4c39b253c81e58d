// `flexpipe run` refuses bad input before it loads the runtime or talks to any rank; these run in
// every build, the one without libtorch included.
#include "cli_harness.h"

namespace flexpipe::test {
namespace {

class RunCli : public CliHarness {
 protected:
  RunCli() : CliHarness("flexpipe_run_cli_") {}
  void expect_error(const std::string& args, const std::string& message) {
    const Outcome run = flexpipe("run " + args);
    EXPECT_EQ(run.exit_code, 2) << args;
    EXPECT_EQ(run.err, "error: " + message + "\n") << args;
    EXPECT_EQ(run.out, "") << args;
  }
};

TEST_F(RunCli, HelpNamesTheLauncherAndEveryOption) {
  const Outcome run = flexpipe("run --help");
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option : {"flexpipe launch -n N", "--verify", "--tolerance", "--partition", "--dtype", "--timeout",
                             "--trace", "--svg", "--json", "--hook", "--fault", "--microbatch-size", "--device"})
    EXPECT_NE(run.out.find(option), std::string::npos) << option;
}

TEST_F(RunCli, BadInputIsOneLineAndExitTwo) {
  expect_error("1f1b -p 2",
               "1f1b runs on 2 devices but this job has 1 rank (WORLD_SIZE); start it with "
               "`flexpipe launch -n 2 -- flexpipe ...`");
  expect_error("1f1b -p 1 --partition ops:1,2",
               "1f1b: partition ops:1,2: the stages hold 3 operators but the graph 'gpt-2x32' has 30");
  expect_error("interleaved-1f1b -p 1 -v 40",
               "interleaved-1f1b: partition: cannot cut 30 operators of gpt-2x32 into 40 non-empty stages");
  expect_error("1f1b -p 1 --fault 1:2", "--fault '1:2': expected RANK:STEP:ACTION or RANK:STEP:ACTION:hang");
  expect_error("1f1b -p 1 --hook FOO", "--hook 'FOO': expected NAME=SPEC, e.g. OFFLOAD_KV=sleep:2");
  expect_error("1f1b -p 1 --steps 0", "--steps: must be a whole number of at least 1, got 0 (see flexpipe run --help)");
  expect_error("1f1b -p 1 --heads 3", "GPT size: hidden 32 is not a multiple of heads 3");
  expect_error("1f1b -p 1 --device gpu",
               "--device 'gpu': expected cpu, cuda (each rank the GPU of its LOCAL_RANK) or cuda:N (GPU N, a whole "
               "number)");
}

TEST_F(RunCli, AMissingRuntimeLibraryIsExplained) {
  const Outcome run = flexpipe("run gpipe -p 1", "FLEXPIPE_RUNTIME_LIBRARY=/nonexistent/libflexpipe_runtime.so");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_NE(run.err.find("error: cannot load the runtime library /nonexistent/libflexpipe_runtime.so"),
            std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("\n(the runtime is built when FLEXPIPE_RUNTIME is ON, against the torch of the Python "
                         "environment scripts/setup.sh makes)\n"),
            std::string::npos)
      << run.err;
}

}  // namespace
}  // namespace flexpipe::test
