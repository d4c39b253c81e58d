// Tuning glibc's malloc to keep a step's freed blocks for the next step, unless the user tuned it.
#include "device/host_allocator.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace flexpipe::runtime {

bool malloc_tuned_by_environment() {
  for (const char* tuned :
       {"GLIBC_TUNABLES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"})
    if (std::getenv(tuned) != nullptr) return true;
  return false;
}

void keep_freed_host_memory() {
#if defined(__GLIBC__)
  if (malloc_tuned_by_environment()) return;
  // By default a block over 128 KiB (a threshold that rises only as such blocks are freed) is its
  // own mapping: freeing it unmaps it, and the next step's allocation maps it again and faults in
  // every page zeroed. A fixed threshold at glibc's 64-bit maximum keeps activations and gradients
  // in the heap, and the trim threshold and pad keep the heap from shrinking and growing every step.
  constexpr int kMiB = 1 << 20;
  mallopt(M_MMAP_THRESHOLD, 32 * kMiB);
  mallopt(M_TRIM_THRESHOLD, 1024 * kMiB);
  mallopt(M_TOP_PAD, 64 * kMiB);
#endif
}

}  // namespace flexpipe::runtime
