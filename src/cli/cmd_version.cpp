// flexpipe version: what this binary is and runs on, the facts that head a bug report.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "build_commit.h"
#include "flexpipe/launch/python_package.h"
#include "flexpipe/launch/runtime_loader.h"
#include "flexpipe/support/error.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

nlohmann::json or_null(const std::optional<std::string>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::string or_missing(const std::optional<std::string>& value) { return value.value_or("not installed"); }

}  // namespace

void add_version_command(CLI::App& app, int&) {
  auto* command = app.add_subcommand(
      "version", "This build, the libtorch its runtime links, the GPUs it sees and the Python it captures with");
  command->footer("Start a bug report with this output (or --json).");
  auto json = std::make_shared<bool>(false);
  command->add_flag("--json", *json, "Print the facts as JSON");
  command->callback([json] {
    std::optional<runtime::RuntimeFacts> facts;
    std::string runtime_problem;
    try {
      facts = runtime_facts();
    } catch (const Error& e) {
      runtime_problem = e.what();
    }
    const PythonVersions python = python_versions();
    if (*json) {
      nlohmann::json libtorch = {{"version", nullptr}, {"cuda", nullptr}};
      nlohmann::json backends = nlohmann::json::array();
      nlohmann::json gpus = nullptr;
      if (facts) {
        libtorch["version"] = facts->libtorch_version;
        if (!facts->cuda_version.empty()) libtorch["cuda"] = facts->cuda_version;
        backends = facts->c10d_backends;
        gpus = facts->gpus;
      }
      const nlohmann::json report = {{"flexpipe", {{"version", FLEXPIPE_VERSION}, {"commit", kBuildCommit}}},
                                     {"libtorch", libtorch},
                                     {"c10d_backends", backends},
                                     {"gpus", gpus},
                                     {"python",
                                      {{"interpreter", python_interpreter()},
                                       {"torch", or_null(python.torch)},
                                       {"torchvision", or_null(python.torchvision)},
                                       {"transformers", or_null(python.transformers)}}}};
      fmt::print("{}\n", report.dump(2));
      return;
    }
    fmt::print("flexpipe {} (commit {})\n", FLEXPIPE_VERSION, kBuildCommit);
    if (facts)
      fmt::print("libtorch {}, {}, c10d backends: {}\nGPUs visible: {}\n", facts->libtorch_version,
                 facts->cuda_version.empty() ? std::string("no CUDA") : "CUDA " + facts->cuda_version,
                 facts->c10d_backends.empty() ? std::string("none")
                                              : fmt::format("{}", fmt::join(facts->c10d_backends, ", ")),
                 facts->gpus);
    else
      fmt::print("libtorch: the runtime is not available: {}\n", runtime_problem);
    fmt::print("python {}: torch {}, torchvision {}, transformers {}\n", python_interpreter(), or_missing(python.torch),
               or_missing(python.torchvision), or_missing(python.transformers));
  });
}

}  // namespace flexpipe::cli
