// The rank keeps the blocks a step frees for the next step: a block of a few MiB comes from the heap
// rather than from a mapping of its own, which freeing would unmap and the next step fault in again.
#include <cstdlib>

#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/host_allocator.h"

namespace flexpipe::runtime {
namespace {

void* volatile sink = nullptr;  // so that the compiler cannot leave out a malloc and its free

// In a child process, whose malloc settings start as glibc's (or as `prepare` sets them): whether a
// 24 MiB block is a mapping of its own. Forked so that the test's own earlier frees, which raise
// glibc's threshold, do not decide it.
bool maps_a_24_mib_block(void (*prepare)()) {
  const pid_t child = fork();
  if (child == 0) {
    prepare();
    malloc_trim(0);  // no free space at the heap's top to take the block from
    const size_t mapped = mallinfo2().hblkhd;
    sink = std::malloc(24 << 20);
    _exit(mallinfo2().hblkhd > mapped ? 1 : 0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  return WEXITSTATUS(status) == 1;
}

TEST(HostAllocator, BlocksOfAFewMiBComeFromTheHeap) {
  if (malloc_tuned_by_environment()) GTEST_SKIP() << "malloc is tuned through the environment, which wins";
  EXPECT_TRUE(maps_a_24_mib_block([] {}));  // glibc's default: any block over 128 KiB at first
  EXPECT_FALSE(maps_a_24_mib_block(keep_freed_host_memory));
}

}  // namespace
}  // namespace flexpipe::runtime
