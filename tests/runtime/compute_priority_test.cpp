// A rank computes at a lower priority than its transport's threads, which it started before.
#include <condition_variable>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "device/compute_priority.h"

namespace flexpipe::runtime {
namespace {

int own_nice() { return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))); }

TEST(ComputePriority, TheComputingThreadAloneIsLowered) {
  // On a thread of its own, so that the test binary's other tests keep their priority.
  int before = 0, after = 0, transport_before = 0, transport_after = 0, spawned = 0;
  std::thread([&] {
    // Started before the call, as Gloo's threads are: it keeps its priority.
    int transport_id = 0;
    bool stop = false;
    std::mutex m;
    std::condition_variable cv;
    std::thread transport([&] {
      std::unique_lock lock(m);
      transport_id = static_cast<int>(syscall(SYS_gettid));
      cv.notify_all();
      cv.wait(lock, [&] { return stop; });
    });
    {
      std::unique_lock lock(m);
      cv.wait(lock, [&] { return transport_id != 0; });
    }
    before = own_nice();
    transport_before = getpriority(PRIO_PROCESS, static_cast<id_t>(transport_id));
    EXPECT_TRUE(lower_compute_priority());
    after = own_nice();
    transport_after = getpriority(PRIO_PROCESS, static_cast<id_t>(transport_id));
    std::thread([&] { spawned = own_nice(); }).join();  // threads it starts later compute too
    {
      std::lock_guard lock(m);
      stop = true;
    }
    cv.notify_all();
    transport.join();
  }).join();
  if (before + kComputeNiceOffset > 19) GTEST_SKIP() << "already at nice " << before;
  EXPECT_EQ(after, before + kComputeNiceOffset);
  EXPECT_EQ(transport_after, transport_before);
  EXPECT_EQ(spawned, after);
}

}  // namespace
}  // namespace flexpipe::runtime
