// The CLI outputs the other suites do not pin: `show` in order, lowered, JSON and program form,
// `simulate --grid` and `--memory-limit`, and `convert --form compute-only`. Every expectation is
// worked out by hand for 1F1B on 2 devices (F = 1, B = 2, free links).
#include "cli_harness.h"

namespace flexpipe::test {
namespace {

class Outputs : public CliHarness {
 protected:
  Outputs() : CliHarness("flexpipe_outputs_") {}
  std::string out(const std::string& args) {
    const Outcome run = flexpipe(args);
    EXPECT_EQ(run.exit_code, 0) << args << ": " << run.err;
    return run.out;
  }
};

TEST_F(Outputs, OrderAndLoweredOrder) {
  EXPECT_EQ(out("show 1f1b -p 2 -m 2 --format order"),
            "d0 | 0F0 0F1 0B0 0B1\n"
            "d1 | 1F0 1B0 1F1 1B1\n");
  // A SEND right after each producer, a RECV right before each consumer.
  EXPECT_EQ(out("show 1f1b -p 2 -m 2 --format order --lowered"),
            "d0 | 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
            "d1 | 1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1\n");
}

TEST_F(Outputs, JsonAndProgramForms) {
  EXPECT_EQ(out("show 1f1b -p 2 -m 2 --format json"),
            "{\n"
            "  \"format\": \"flexpipe-schedule\",\n"
            "  \"version\": 1,\n"
            "  \"name\": \"1f1b\",\n"
            "  \"devices\": 2,\n"
            "  \"microbatches\": 2,\n"
            "  \"stages_per_pipeline\": 2,\n"
            "  \"pipelines\": 1,\n"
            "  \"placement\": [0,1],\n"
            "  \"actions\": [\n"
            "    [\"0F0\",\"0F1\",\"0B0\",\"0B1\"],\n"
            "    [\"1F0\",\"1B0\",\"1F1\",\"1B1\"]\n"
            "  ]\n"
            "}\n");
  EXPECT_EQ(out("show 1f1b -p 2 -m 2 --format program"),
            "# Schedule \"1f1b\": every device's actions in order; K(s) is stage s's next micro-batch.\n"
            "name \"1f1b\"\n"
            "devices 2\n"
            "microbatches 2\n"
            "stages 2\n"
            "on 0 {\n"
            "  F(0)  F(0)  B(0)  B(0)\n"
            "}\n"
            "on 1 {\n"
            "  repeat 2 { F(1)  B(1) }\n"
            "}\n");
  EXPECT_EQ(out("show 1f1b -p 2 -m 2 --format explicit-program"),
            "# Schedule \"1f1b\": every device's actions in order.\n"
            "name \"1f1b\"\n"
            "devices 2\n"
            "microbatches 2\n"
            "stages 2\n"
            "on 0 {\n"
            "  F(0, 0)  F(0, 1)  B(0, 0)  B(0, 1)\n"
            "}\n"
            "on 1 {\n"
            "  F(1, 0)  B(1, 0)  F(1, 1)  B(1, 1)\n"
            "}\n");
}

TEST_F(Outputs, SimulateGrid) {
  // d0: F0 [0,1] F1 [1,2], waits for d1's B0 [2,4], B0 [4,6], waits for B1 [5,7], B1 [7,9].
  const std::string text = out("simulate 1f1b -p 2 -m 2 --uniform-costs 1,1,1,0 --grid");
  EXPECT_NE(text.find("makespan 9,"), std::string::npos) << text;
  EXPECT_NE(text.find("d0 |F0 F1 .  .  B0 -- .  B1 --\n"
                      "d1 |.  F0 B0 -- F1 B1 -- .  .\n"),
            std::string::npos)
      << text;
}

TEST_F(Outputs, MemoryLimitNamesTheDeviceThatDoesNotFit) {
  // 1F1B, 4 micro-batches: device 0 holds 2 micro-batches at its peak, device 1 one; 1 unit each.
  const Outcome run = flexpipe("simulate 1f1b -p 2 -m 4 --uniform-costs 1,1,1,0 --memory-limit 1");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("makespan 15, bubble 20.0%"), std::string::npos) << run.out;  // 12 busy + (p-1)(F+B)
  EXPECT_NE(run.out.find("memory does not fit on device 0"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("d0        12     3            2          1              0         1    no"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("d1        12     3            1          1              0         1   yes"),
            std::string::npos)
      << run.out;
}

TEST_F(Outputs, ConvertComputeOnlyDropsTheCommunication) {
  const std::string lowered = (dir_ / "lowered.json").string(), csv = (dir_ / "compute.csv").string();
  out("convert 1f1b -p 2 -m 2 --form lowered -o " + lowered);
  EXPECT_NE(slurp(lowered).find("\"0SEND_F0\""), std::string::npos);
  out("convert " + lowered + " --form compute-only -o " + csv);
  EXPECT_EQ(slurp(csv), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
}

}  // namespace
}  // namespace flexpipe::test
