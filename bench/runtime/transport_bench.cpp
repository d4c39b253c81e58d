// Point-to-point ping-pong over Gloo on loopback (docs/performance.md): raw c10d ProcessGroupGloo
// send/recv against our Transport over the same backend, 2 ranks as 2 threads of this process, so
// the difference is what the wrapper costs. Time per iteration is one round trip; bytes/s counts
// both directions.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "transport/transport.h"

namespace flexpipe::runtime {
namespace {

using namespace std::chrono_literals;
constexpr std::chrono::milliseconds kTimeout = 60s;
constexpr uint32_t kPingTag = 1;
constexpr uint32_t kPongTag = 2;

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::runtime_error("cannot find a free port on 127.0.0.1");
  ::close(fd);
  return ntohs(address.sin_port);
}

// Runs make(rank) for ranks 0 and 1 at once (a rendezvous needs both), rank 0 first so that rank 1's
// store client is not refused and sent into its 1 s retry.
template <class T, class Make>
std::array<T, 2> on_two_threads(Make make) {
  std::array<T, 2> made;
  std::thread second([&] {
    std::this_thread::sleep_for(50ms);
    made[1] = make(1);
  });
  made[0] = make(0);
  second.join();
  return made;
}

struct RawGroups {
  std::array<c10::intrusive_ptr<c10d::ProcessGroupGloo>, 2> ranks;
};

struct OurTransports {
  std::array<std::unique_ptr<Transport>, 2> ranks;
};

// Built on first use and torn down before main returns: c10d objects must not outlive libtorch's
// own statics.
std::unique_ptr<RawGroups> raw_groups;
std::unique_ptr<OurTransports> our_transports;

RawGroups& raw() {
  if (!raw_groups) {
    const int port = free_port();
    raw_groups = std::make_unique<RawGroups>();
    raw_groups->ranks = on_two_threads<c10::intrusive_ptr<c10d::ProcessGroupGloo>>([port](int rank) {
      c10d::TCPStoreOptions store_options;
      store_options.port = static_cast<uint16_t>(port);
      store_options.isServer = rank == 0;
      store_options.numWorkers = 2;
      store_options.timeout = kTimeout;
      auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
      auto options = c10d::ProcessGroupGloo::Options::create(kTimeout);
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("bench", store), rank,
                                                         2, options);
    });
  }
  return *raw_groups;
}

OurTransports& ours() {
  if (!our_transports) {
    const int port = free_port();
    our_transports = std::make_unique<OurTransports>();
    our_transports->ranks = on_two_threads<std::unique_ptr<Transport>>([port](int rank) {
      RankEnv env;
      env.rank = rank;
      env.world_size = 2;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      return connect_gloo(env, kTimeout);
    });
  }
  return *our_transports;
}

using Clock = std::chrono::steady_clock;

void report(benchmark::State& state, int64_t bytes, Clock::duration elapsed) {
  state.SetBytesProcessed(2 * bytes * state.iterations());
  const double microseconds = std::chrono::duration<double, std::micro>(elapsed).count();
  state.counters["one_way_us"] = microseconds / (2.0 * static_cast<double>(state.iterations()));
}

void BM_RawGlooPingPong(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  RawGroups& groups = raw();
  // Rank 1 echoes exactly as many messages as rank 0's loop will send.
  std::thread echo([&groups, bytes, iterations = state.max_iterations] {
    std::vector<at::Tensor> buffer{at::empty({bytes}, at::kByte)};
    for (benchmark::IterationCount i = 0; i < iterations; ++i) {
      groups.ranks[1]->recv(buffer, 0, kPingTag)->wait();
      groups.ranks[1]->send(buffer, 0, kPongTag)->wait();
    }
  });
  std::vector<at::Tensor> ping{at::ones({bytes}, at::kByte)};
  std::vector<at::Tensor> pong{at::empty({bytes}, at::kByte)};
  const auto start = Clock::now();
  for (auto _ : state) {
    groups.ranks[0]->send(ping, 1, kPingTag)->wait();
    groups.ranks[0]->recv(pong, 1, kPongTag)->wait();
  }
  const auto elapsed = Clock::now() - start;
  echo.join();
  report(state, bytes, elapsed);
}

void BM_TransportPingPong(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  OurTransports& transports = ours();
  std::thread echo([&transports, bytes, iterations = state.max_iterations] {
    at::Tensor buffer = at::empty({bytes}, at::kByte);
    Transport& rank1 = *transports.ranks[1];
    for (benchmark::IterationCount i = 0; i < iterations; ++i) {
      rank1.post_recv(buffer, 0, kPingTag)->wait(kTimeout);
      rank1.post_send(buffer, 0, kPongTag)->wait(kTimeout);
    }
  });
  at::Tensor ping = at::ones({bytes}, at::kByte);
  at::Tensor pong = at::empty({bytes}, at::kByte);
  Transport& rank0 = *transports.ranks[0];
  const auto start = Clock::now();
  for (auto _ : state) {
    rank0.post_send(ping, 1, kPingTag)->wait(kTimeout);
    rank0.post_recv(pong, 1, kPongTag)->wait(kTimeout);
  }
  const auto elapsed = Clock::now() - start;
  echo.join();
  report(state, bytes, elapsed);
}

// 4 B to 16 MiB. Real time: rank 0's thread sleeps in wait(), so its CPU time says nothing.
BENCHMARK(BM_RawGlooPingPong)->RangeMultiplier(16)->Range(4, 16 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TransportPingPong)->RangeMultiplier(16)->Range(4, 16 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace flexpipe::runtime

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  flexpipe::runtime::raw_groups.reset();
  flexpipe::runtime::our_transports.reset();
  return 0;
}
