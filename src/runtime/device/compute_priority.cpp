// Lowering the computing threads' scheduling priority below the transport's (nice values per thread).
#include "device/compute_priority.h"

#include <cerrno>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace flexpipe::runtime {

bool lower_compute_priority() {
  // PRIO_PROCESS with a thread id addresses that thread alone on Linux.
  const auto thread = static_cast<id_t>(syscall(SYS_gettid));
  errno = 0;
  const int current = getpriority(PRIO_PROCESS, thread);
  if (current == -1 && errno != 0) return false;
  return setpriority(PRIO_PROCESS, thread, current + kComputeNiceOffset) == 0;
}

}  // namespace flexpipe::runtime
