// Which of a rank's threads runs first when they share a core: its transport's (docs/runtime.md,
// "Threads and cores").
#pragma once

namespace flexpipe::runtime {

// How much lower than its transport's threads a rank computes, in nice steps: enough that a
// transport thread woken by a message preempts the computation at once rather than after a slice.
inline constexpr int kComputeNiceOffset = 5;

// Lowers the calling thread's scheduling priority by kComputeNiceOffset nice steps (Linux nice
// values are per thread; threads it creates later inherit the lower one). Call it on the thread
// that computes, after the transport has started its threads, which keep theirs. A process may
// always lower its own priority; returns false where the system refused anyway.
bool lower_compute_priority();

}  // namespace flexpipe::runtime
