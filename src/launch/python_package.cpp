// The project's Python package run in the environment's interpreter: replacing this process, or as a child.
#include "flexpipe/launch/python_package.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"

namespace flexpipe {

namespace {
std::string from_environment(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}
}  // namespace

std::string python_interpreter() { return from_environment("FLEXPIPE_PYTHON", FLEXPIPE_DEFAULT_PYTHON); }

std::string python_package_dir() { return from_environment("FLEXPIPE_PYTHON_PACKAGE_DIR", FLEXPIPE_PYTHON_DIR); }

void exec_python_package(const std::vector<std::string>& arguments) {
  const std::string interpreter = python_interpreter();
  const std::string package = python_package_dir();
  if (access((package + "/flexpipe/__main__.py").c_str(), R_OK) != 0)
    throw Error(
        fmt::format("the Python package is missing: {}/flexpipe (set FLEXPIPE_PYTHON_PACKAGE_DIR to the "
                    "repository's python/ folder)",
                    package));
  const char* existing = std::getenv("PYTHONPATH");
  const std::string path = existing != nullptr && *existing != '\0' ? package + ":" + existing : package;
  setenv("PYTHONPATH", path.c_str(), 1);
  std::vector<std::string> command = {interpreter, "-m", "flexpipe"};
  command.insert(command.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (std::string& word : command) argv.push_back(word.data());
  argv.push_back(nullptr);
  execv(interpreter.c_str(), argv.data());
  throw Error(
      fmt::format("cannot run {}: {} (scripts/setup.sh makes the Python environment with PyTorch; or set "
                  "FLEXPIPE_PYTHON to a Python that has PyTorch)",
                  interpreter, std::strerror(errno)));
}

PythonVersions python_versions() {
  // One package a line, "-" where it is missing; metadata only, so that torch's 2 s import is not paid.
  const std::string command = "'" + python_interpreter() +
                              "' -c 'import importlib.metadata as m\n"
                              "for p in (\"torch\", \"torchvision\", \"transformers\"):\n"
                              "    try: print(m.version(p))\n"
                              "    except m.PackageNotFoundError: print(\"-\")' 2>/dev/null";
  std::fflush(stdout);
  PythonVersions versions;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return versions;
  std::string output;
  char buffer[256];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  if (pclose(pipe) != 0) return versions;  // no such interpreter, or it failed: nothing known
  std::optional<std::string>* fields[] = {&versions.torch, &versions.torchvision, &versions.transformers};
  size_t start = 0;
  for (std::optional<std::string>* field : fields) {
    const size_t end = output.find('\n', start);
    if (end == std::string::npos) break;
    const std::string line = output.substr(start, end - start);
    if (line != "-") *field = line;
    start = end + 1;
  }
  return versions;
}

int run_python_package(const std::vector<std::string>& arguments) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = fork();
  if (child < 0) throw Error(fmt::format("cannot start {}: {}", python_interpreter(), std::strerror(errno)));
  if (child == 0) {
    try {
      exec_python_package(arguments);
    } catch (const Error& e) {
      report_error(kExitBadInput, e.what());
    }
    _exit(127);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) throw Error(fmt::format("waiting for {}: {}", python_interpreter(), std::strerror(errno)));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace flexpipe
