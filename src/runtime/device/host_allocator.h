// How the rank's host memory is allocated: the runtime frees and allocates the same tensors every
// step, which glibc's default malloc turns into system calls and page faults (docs/performance.md,
// "Runtime: host allocator").
#pragma once

namespace flexpipe::runtime {

// Whether the user tuned malloc through the environment (MALLOC_*_ or GLIBC_TUNABLES).
bool malloc_tuned_by_environment();

// Keeps freed blocks of up to 32 MiB in the process's heap for the next step instead of unmapping
// them, unless the user tuned malloc through the environment (MALLOC_*_ or GLIBC_TUNABLES), which
// then wins. Call once, before the first step; does nothing where the C library is not glibc.
void keep_freed_host_memory();

}  // namespace flexpipe::runtime
