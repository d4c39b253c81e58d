// flexpipe version: the facts of this build, its libtorch and its Python, as a bug report starts with
// them; and the binary and the runtime load where there is no NVIDIA driver (nothing NEEDs libcuda).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>

#include "../cli/cli_harness.h"

namespace flexpipe::test {
namespace {

class Version : public CliHarness {
 protected:
  Version() : CliHarness("flexpipe_version_") {}
};

std::string runtime_library() {
  const std::string binary = FLEXPIPE_BINARY;
  return binary.substr(0, binary.rfind('/') + 1) + "libflexpipe_runtime.so";
}

std::string output_of(const std::string& command) {
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[512];
    while (fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
    pclose(pipe);
  }
  return output;
}

std::string python_package_version(const std::string& package) {
  std::string version =
      output_of(fmt::format("{} -c \"import importlib.metadata as m; print(m.version('{}'))\" 2>/dev/null",
                            FLEXPIPE_PYTHON, package));
  while (!version.empty() && version.back() == '\n') version.pop_back();
  return version;
}

TEST_F(Version, JsonHasExactlyTheReportsKeysWithThisBuildsFacts) {
  const Outcome run = flexpipe("version --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json facts = nlohmann::json::parse(run.out);
  std::vector<std::string> keys;
  for (const auto& [key, value] : facts.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"c10d_backends", "flexpipe", "gpus", "libtorch", "python"}));
  EXPECT_EQ(facts["flexpipe"].size(), 2u);
  EXPECT_EQ(facts["flexpipe"]["version"], "0.1.0");
  EXPECT_TRUE(facts["flexpipe"]["commit"].is_string());
  EXPECT_EQ(facts["libtorch"].size(), 2u);
  EXPECT_EQ(facts["libtorch"]["version"], TORCH_VERSION);
#ifdef FLEXPIPE_TORCH_CUDA
  EXPECT_EQ(facts["libtorch"]["cuda"], FLEXPIPE_TEST_TORCH_CUDA);
  EXPECT_NE(std::find(facts["c10d_backends"].begin(), facts["c10d_backends"].end(), "NCCL"),
            facts["c10d_backends"].end());
#else
  EXPECT_TRUE(facts["libtorch"]["cuda"].is_null());
#endif
  EXPECT_NE(std::find(facts["c10d_backends"].begin(), facts["c10d_backends"].end(), "GLOO"),
            facts["c10d_backends"].end());
  EXPECT_EQ(facts["gpus"], static_cast<int>(torch::cuda::device_count()));
  // The Python the binary captures with is the environment whose torch the runtime links.
  EXPECT_EQ(facts["python"].size(), 4u);
  EXPECT_EQ(facts["python"]["interpreter"], FLEXPIPE_PYTHON);
  EXPECT_EQ(facts["python"]["torch"], python_package_version("torch"));
  EXPECT_EQ(facts["python"]["torch"].get<std::string>().substr(0, std::string(TORCH_VERSION).size()), TORCH_VERSION);
  EXPECT_EQ(facts["python"]["torchvision"], python_package_version("torchvision"));
  EXPECT_EQ(facts["python"]["transformers"], python_package_version("transformers"));
}

TEST_F(Version, TextSaysTheSameInFourLines) {
  const Outcome run = flexpipe("version");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json facts = nlohmann::json::parse(flexpipe("version --json").out);
  const std::string libtorch =
      fmt::format("libtorch {}, {}, c10d backends: ", TORCH_VERSION,
                  facts["libtorch"]["cuda"].is_null() ? std::string("no CUDA")
                                                      : "CUDA " + facts["libtorch"]["cuda"].get<std::string>());
  EXPECT_EQ(run.out.rfind("flexpipe 0.1.0 (commit " + facts["flexpipe"]["commit"].get<std::string>() + ")\n" + libtorch,
                          0),
            0u)
      << run.out;
  EXPECT_NE(run.out.find(fmt::format("\nGPUs visible: {}\npython {}: torch {}, torchvision {}, transformers {}\n",
                                     facts["gpus"].get<int>(), FLEXPIPE_PYTHON,
                                     facts["python"]["torch"].get<std::string>(),
                                     facts["python"]["torchvision"].get<std::string>(),
                                     facts["python"]["transformers"].get<std::string>())),
            std::string::npos)
      << run.out;
}

// Without the runtime, the libtorch facts are unknown (null), the rest is still reported.
TEST_F(Version, WithoutTheRuntimeTheLibtorchFactsAreNull) {
  const Outcome run = flexpipe("version --json", "FLEXPIPE_RUNTIME_LIBRARY=/nonexistent/libflexpipe_runtime.so");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json facts = nlohmann::json::parse(run.out);
  EXPECT_TRUE(facts["libtorch"]["version"].is_null());
  EXPECT_TRUE(facts["libtorch"]["cuda"].is_null());
  EXPECT_EQ(facts["c10d_backends"], nlohmann::json::array());
  EXPECT_TRUE(facts["gpus"].is_null());
  EXPECT_EQ(facts["flexpipe"]["version"], "0.1.0");
  const Outcome text = flexpipe("version", "FLEXPIPE_RUNTIME_LIBRARY=/nonexistent/libflexpipe_runtime.so");
  EXPECT_NE(text.out.find("\nlibtorch: the runtime is not available: cannot load the runtime library "
                          "/nonexistent/libflexpipe_runtime.so: "),
            std::string::npos)
      << text.out;
}

// A missing interpreter leaves the Python packages unknown, not the command failed.
TEST_F(Version, AMissingPythonLeavesItsPackagesNull) {
  const Outcome run = flexpipe("version --json", "FLEXPIPE_PYTHON=/nonexistent/python");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json facts = nlohmann::json::parse(run.out);
  EXPECT_EQ(facts["python"]["interpreter"], "/nonexistent/python");
  EXPECT_TRUE(facts["python"]["torch"].is_null());
  EXPECT_TRUE(facts["python"]["transformers"].is_null());
}

// Built against the CUDA wheel, neither the binary nor the runtime NEEDs the driver (libcuda.so.1),
// which a machine without a GPU does not have: libtorch opens it lazily.
TEST(Linking, NeitherTheBinaryNorTheRuntimeNeedsTheDriver) {
  for (const std::string& file : {std::string(FLEXPIPE_BINARY), runtime_library()}) {
    const std::string needed = output_of("readelf -d " + file + " 2>&1");
    ASSERT_NE(needed.find("(NEEDED)"), std::string::npos) << file << ": " << needed;
    EXPECT_EQ(needed.find("libcuda.so"), std::string::npos) << file << ": " << needed;
  }
  const std::string runtime_needed = output_of("readelf -d " + runtime_library());
  // And it does link libtorch's CPU library (and, from a CUDA build, its CUDA one: kept though unnamed).
  EXPECT_NE(runtime_needed.find("[libtorch_cpu.so]"), std::string::npos) << runtime_needed;
#ifdef FLEXPIPE_TORCH_CUDA
  EXPECT_NE(runtime_needed.find("[libtorch_cuda.so]"), std::string::npos) << runtime_needed;
#endif
}

}  // namespace
}  // namespace flexpipe::test
