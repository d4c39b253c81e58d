// The project's Python package (python/flexpipe) and the interpreter that has PyTorch: what only Python
// can do (tracing a user's nn.Module) runs there. That interpreter is the project's Python environment
// (scripts/setup.sh), which need not be the `python3` first on PATH.
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace flexpipe {

// FLEXPIPE_PYTHON, or the environment's interpreter the binary was built with (FLEXPIPE_PYTHON in CMake).
std::string python_interpreter();
// FLEXPIPE_PYTHON_PACKAGE_DIR, or the source tree's python/ folder this binary was built from.
std::string python_package_dir();
// Replaces this process with `python3 -m flexpipe ARGS...` (the package on PYTHONPATH), so that the
// package's exit code and output are the command's. Returns only on failure: throws Error naming the
// interpreter and how to install it.
[[noreturn]] void exec_python_package(const std::vector<std::string>& arguments);

// The versions of the packages the interpreter has (nothing where one is not installed, or where the
// interpreter cannot run), read from their metadata without importing them.
struct PythonVersions {
  std::optional<std::string> torch, torchvision, transformers;
};
PythonVersions python_versions();

// Runs `python3 -m flexpipe ARGS...` as a child (its output is this process's) and returns its exit code.
int run_python_package(const std::vector<std::string>& arguments);

}  // namespace flexpipe
