#pragma once
// The project's Python package (python/flexpipe) and the interpreter that has PyTorch: what only Python
// can do (tracing a user's nn.Module) runs there. Debian's python3-torch is installed for
// /usr/bin/python3, which need not be the `python3` first on PATH.
#include <string>
#include <vector>

namespace flexpipe::cli {

// FLEXPIPE_PYTHON, or /usr/bin/python3.
std::string python_interpreter();
// FLEXPIPE_PYTHON_PACKAGE_DIR, or the source tree's python/ folder this binary was built from.
std::string python_package_dir();
// Replaces this process with `python3 -m flexpipe ARGS...` (the package on PYTHONPATH), so that the
// package's exit code and output are the command's. Returns only on failure: throws Error naming the
// interpreter and how to install it.
[[noreturn]] void exec_python_package(const std::vector<std::string>& arguments);

// Runs `python3 -m flexpipe ARGS...` as a child (its output is this process's) and returns its exit code.
int run_python_package(const std::vector<std::string>& arguments);

}  // namespace flexpipe::cli
