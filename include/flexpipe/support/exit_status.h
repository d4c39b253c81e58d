// The exit codes of every FlexPipe entry point: the `flexpipe` binary (src/cli/main.cpp) and the
// runtime's entry points it calls across dlopen (include/flexpipe/runtime/entry.h), whose code the
// process exits with. One table, so that a script can tell a failed check from bad input everywhere.
// `flexpipe launch` is the exception: it exits with the code of the first rank that failed
// (docs/launch.md).
#pragma once
#include <exception>
#include <string_view>

namespace flexpipe {

enum ExitCode : int {
  kExitSuccess = 0,
  // The command ran and the answer is no: a check found errors, nothing fits the memory, the
  // trained model differs from the single-process reference, training diverged (a non-finite loss).
  kExitProblemsFound = 1,
  // An Error: unknown schedule, malformed file (with FILE:LINE:COL), impossible parameters, bad options.
  kExitBadInput = 2,
  // Any other exception (a bug), or in the runtime a peer or a transfer that failed mid-run.
  kExitFailure = 3,
};

// Prints "error: MESSAGE" on stderr and returns `code`: for a failure the caller has classified itself. A
// message whose first line already reads "PLACE: error: ..." (a program's diagnostics) is printed as it is,
// so that no line says "error:" twice.
int report_error(ExitCode code, std::string_view message);

// Prints the exception that ended an entry point as one line on stderr, with `context` (e.g. "rank 1: ")
// before its message, and returns its exit code: an Error is bad input ("error: ..."), anything else a
// bug ("internal error: ...").
int report_exception(const std::exception& exception, std::string_view context = {});

}  // namespace flexpipe
