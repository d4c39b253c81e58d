// The commit the binary was built from, "0123abcd4567" or "0123abcd4567-dirty" (uncommitted changes)
// or "unknown" (not built from a git checkout). Generated at every build (cmake/write_build_commit.cmake).
#pragma once

namespace flexpipe::cli {

extern const char* const kBuildCommit;

}  // namespace flexpipe::cli
