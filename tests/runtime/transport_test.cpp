// The transports: the in-process one across threads, and Gloo with 2 and 3 ranks as threads of this
// process, each rendezvousing through the store on 127.0.0.1 (plus one peer as a real process that
// is killed).
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <future>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "transport/transport.h"

namespace flexpipe::runtime {
namespace {

using namespace std::chrono_literals;

// Generous: a loaded CI machine must not turn a slow rendezvous into a failure.
constexpr std::chrono::milliseconds kPatient = 20s;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const TransportError& error) {
    return error.what();
  }
  return "no error";
}

// Runs body(rank) on one thread per rank. An exception escaping a body fails the test and names the rank.
void on_threads(int world_size, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank)
    threads.emplace_back([&body, rank] {
      try {
        body(rank);
      } catch (const std::exception& error) {
        ADD_FAILURE() << "rank " << rank << ": " << error.what();
      }
    });
  for (std::thread& thread : threads) thread.join();
}

// A port nothing listens on now: bind port 0, read what the kernel chose, let it go. Another process
// could take it in between, but the window is microseconds and the port range large.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    throw std::runtime_error("cannot find a free port on 127.0.0.1");
  ::close(fd);
  return ntohs(address.sin_port);
}

RankEnv loopback_env(int rank, int world_size, int port) {
  RankEnv env;
  env.rank = rank;
  env.world_size = world_size;
  env.local_rank = rank;
  env.local_world_size = world_size;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  return env;
}

// A client refused by a store not yet listening retries every 100 ms: giving rank 0 a head start
// spares the retry.
std::unique_ptr<Transport> connect_loopback(int rank, int world_size, int port, std::chrono::milliseconds timeout) {
  if (rank > 0) std::this_thread::sleep_for(50ms);
  return connect_gloo(loopback_env(rank, world_size, port), timeout);
}

// body(transport) on one thread per rank, each connected through its own Gloo group. No rank tears its
// group down before every body is done, so no one sees a peer leave early.
void with_gloo(int world_size, const std::function<void(Transport&)>& body) {
  const int port = free_port();
  std::barrier done(world_size);
  on_threads(world_size, [&](int rank) {
    std::unique_ptr<Transport> transport;
    try {
      transport = connect_loopback(rank, world_size, port, kPatient);
      body(*transport);
    } catch (...) {
      done.arrive_and_wait();
      throw;
    }
    done.arrive_and_wait();
  });
}

void with_local(int world_size, const std::function<void(Transport&)>& body) {
  auto transports = make_local_transports(world_size);
  on_threads(world_size, [&](int rank) { body(*transports[rank]); });
}

// Distinct contents per (value, dtype), so a tensor delivered under the wrong tag shows.
at::Tensor payload(int64_t numel, at::ScalarType dtype, int64_t value) {
  return at::arange(numel, at::TensorOptions().dtype(dtype)).add_(value * 1000);
}

// ---------------------------------------------------------------------------------------------
// Local transport

// How Gloo reports a loopback peer whose sockets closed: an orderly close, or a read error (a reset)
// when the connection was torn down first. Which one comes depends on timing.
bool peer_gone(const std::string& error) {
  return error.starts_with("Connection closed by peer [127.0.0.1]:") || error.starts_with("Read error [127.0.0.1]:");
}

TEST(LocalTransport, DescribesItself) {
  auto transports = make_local_transports(3);
  ASSERT_EQ(transports.size(), 3u);
  EXPECT_EQ(transports[2]->rank(), 2);
  EXPECT_EQ(transports[2]->world_size(), 3);
  EXPECT_EQ(transports[0]->backend(), "local");
  EXPECT_EQ(error_of([] { make_local_transports(0); }), "a local transport needs at least 1 rank, not 0");
}

TEST(LocalTransport, DeliversInTagOrderWhenPostedInOrder) {
  constexpr int kMessages = 10;
  with_local(2, [](Transport& transport) {
    std::vector<at::Tensor> tensors;
    std::vector<std::unique_ptr<Transfer>> transfers;
    for (int tag = 0; tag < kMessages; ++tag) {
      if (transport.rank() == 0) {
        tensors.push_back(payload(16, at::kFloat, tag));
        transfers.push_back(transport.post_send(tensors.back(), 1, tag));
      } else {
        tensors.push_back(at::zeros({16}, at::kFloat));
        transfers.push_back(transport.post_recv(tensors.back(), 0, tag));
      }
    }
    for (auto& transfer : transfers) transfer->wait(kPatient);
    if (transport.rank() == 1) {
      for (int tag = 0; tag < kMessages; ++tag) EXPECT_TRUE(at::equal(tensors[tag], payload(16, at::kFloat, tag)));
    }
  });
}

TEST(LocalTransport, ReusesATagOnceItsTransferCompleted) {
  with_local(2, [](Transport& transport) {
    for (int round = 0; round < 20; ++round) {
      if (transport.rank() == 0) {
        transport.post_send(payload(4, at::kLong, round), 1, 7)->wait(kPatient);
      } else {
        at::Tensor received = at::zeros({4}, at::kLong);
        transport.post_recv(received, 0, 7)->wait(kPatient);
        EXPECT_TRUE(at::equal(received, payload(4, at::kLong, round))) << "round " << round;
      }
    }
  });
}

TEST(LocalTransport, MatchesTagsPostedOutOfOrder) {
  with_local(2, [](Transport& transport) {
    const std::vector<uint32_t> send_order{1, 2, 3, 4, 5};
    const std::vector<uint32_t> recv_order{5, 3, 1, 4, 2};
    std::vector<at::Tensor> received;
    std::vector<std::unique_ptr<Transfer>> transfers;
    if (transport.rank() == 0) {
      for (uint32_t tag : send_order) transfers.push_back(transport.post_send(payload(8, at::kDouble, tag), 1, tag));
    } else {
      for (uint32_t tag : recv_order) {
        received.push_back(at::zeros({8}, at::kDouble));
        transfers.push_back(transport.post_recv(received.back(), 0, tag));
      }
    }
    // Wait in yet another order: completion must not depend on it.
    for (int index : {2, 0, 4, 1, 3}) transfers[index]->wait(kPatient);
    if (transport.rank() == 1) {
      for (size_t i = 0; i < recv_order.size(); ++i)
        EXPECT_TRUE(at::equal(received[i], payload(8, at::kDouble, recv_order[i]))) << "tag " << recv_order[i];
    }
  });
}

TEST(LocalTransport, SeparatesSendersByRank) {
  // Ranks 1 and 2 both send tag 0 to rank 0: the (sender, tag) pair, not the tag, selects the mailbox.
  with_local(3, [](Transport& transport) {
    if (transport.rank() == 0) {
      at::Tensor from_two = at::zeros({3}, at::kLong);
      at::Tensor from_one = at::zeros({3}, at::kLong);
      auto second = transport.post_recv(from_two, 2, 0);
      auto first = transport.post_recv(from_one, 1, 0);
      first->wait(kPatient);
      second->wait(kPatient);
      EXPECT_TRUE(at::equal(from_one, payload(3, at::kLong, 1)));
      EXPECT_TRUE(at::equal(from_two, payload(3, at::kLong, 2)));
    } else {
      transport.post_send(payload(3, at::kLong, transport.rank()), 0, 0)->wait(kPatient);
    }
  });
}

TEST(LocalTransport, ReceiveTimesOutNamingTagAndSender) {
  auto transports = make_local_transports(2);
  at::Tensor target = at::zeros({4});
  auto transfer = transports[1]->post_recv(target, 0, 7);
  EXPECT_EQ(error_of([&] { transfer->wait(100ms); }), "timed out after 100 ms waiting to receive tag 7 from rank 0");
  // The outcome sticks: a second wait reports the same failure without waiting again.
  EXPECT_EQ(error_of([&] { transfer->wait(10s); }), "timed out after 100 ms waiting to receive tag 7 from rank 0");
}

TEST(LocalTransport, SendTimesOutNamingTagAndReceiver) {
  auto transports = make_local_transports(2);
  auto transfer = transports[0]->post_send(at::ones({4}), 1, 3);
  EXPECT_EQ(error_of([&] { transfer->wait(50ms); }), "timed out after 50 ms waiting for rank 1 to receive tag 3");
}

TEST(LocalTransport, TimedOutReceiveNoLongerMatches) {
  auto transports = make_local_transports(2);
  at::Tensor abandoned = at::zeros({2});
  auto late = transports[1]->post_recv(abandoned, 0, 1);
  EXPECT_NE(error_of([&] { late->wait(10ms); }), "no error");
  // The sender's tensor must land in the receive posted after the timeout, not in the abandoned one.
  auto send = transports[0]->post_send(at::full({2}, 5.0), 1, 1);
  at::Tensor fresh = at::zeros({2});
  auto recv = transports[1]->post_recv(fresh, 0, 1);
  send->wait(kPatient);
  recv->wait(kPatient);
  EXPECT_TRUE(at::equal(fresh, at::full({2}, 5.0)));
  EXPECT_TRUE(at::equal(abandoned, at::zeros({2})));
}

TEST(LocalTransport, ReportsMismatchedTensorsOnBothSides) {
  auto transports = make_local_transports(2);
  auto send = transports[0]->post_send(at::ones({4}, at::kFloat), 1, 2);
  at::Tensor target = at::zeros({4}, at::kDouble);
  auto recv = transports[1]->post_recv(target, 0, 2);
  const std::string expected =
      "mismatched transfer of tag 2 from rank 0 to rank 1: sent Float[4] but the receive was "
      "posted for Double[4]";
  EXPECT_EQ(error_of([&] { send->wait(kPatient); }), expected);
  EXPECT_EQ(error_of([&] { recv->wait(kPatient); }), expected);
}

TEST(LocalTransport, CopiesIntoTheReceiversTensorWhateverItsShape) {
  auto transports = make_local_transports(2);
  at::Tensor target = at::zeros({2, 3});
  auto recv = transports[1]->post_recv(target, 0, 0);
  transports[0]->post_send(at::arange(6, at::kFloat), 1, 0)->wait(kPatient);
  recv->wait(kPatient);
  EXPECT_TRUE(at::equal(target, at::arange(6, at::kFloat).view({2, 3})));
}

TEST(LocalTransport, ClosedPeerFailsPendingTransfersAtOnce) {
  auto transports = make_local_transports(3);
  at::Tensor target = at::zeros({4});
  auto recv = transports[1]->post_recv(target, 0, 5);
  auto send = transports[2]->post_send(at::ones({4}), 0, 6);
  std::thread closer([&] {
    std::this_thread::sleep_for(50ms);
    transports[0].reset();
  });
  // The closing ends the waits, not their timeouts (which would say "timed out after 20000 ms").
  EXPECT_EQ(error_of([&] { recv->wait(kPatient); }), "rank 0 closed its transport before sending tag 5");
  EXPECT_EQ(error_of([&] { send->wait(kPatient); }), "rank 0 closed its transport before receiving tag 6");
  closer.join();
  // Later transfers with the closed rank fail at once too, and so do collectives.
  EXPECT_EQ(error_of([&] { transports[1]->post_recv(target, 0, 8)->wait(kPatient); }),
            "rank 0 closed its transport before sending tag 8");
  EXPECT_EQ(error_of([&] { transports[1]->barrier(kPatient); }), "barrier: rank 0 closed its transport");
}

TEST(LocalTransport, RejectsBadPosts) {
  auto transports = make_local_transports(2);
  Transport& transport = *transports[0];
  EXPECT_EQ(error_of([&] { transport.post_send(at::ones({2}), 0, 1); }),
            "cannot send tag 1 to/from rank 0: peers are the other ranks of 0..1");
  EXPECT_EQ(error_of([&] { transport.post_recv(at::ones({2}), 2, 1); }),
            "cannot receive tag 1 to/from rank 2: peers are the other ranks of 0..1");
  EXPECT_EQ(error_of([&] { transport.post_send(at::ones({2}), 1, 0x80000000u); }),
            "tag 2147483648 is too large (Gloo tags are at most 2^31-1)");
  EXPECT_EQ(error_of([&] {
              transport.post_send(at::ones({4, 4}).t(), 1, 1);
            }),
            "cannot send tag 1: the tensor must be defined, contiguous and on the CPU");
}

TEST(LocalTransport, AllReduceSumsOverRanksRepeatedly) {
  constexpr int kWorld = 4;
  with_local(kWorld, [](Transport& transport) {
    for (int round = 0; round < 5; ++round) {
      at::Tensor value = at::full({3}, transport.rank() + 1 + round, at::kDouble);
      transport.all_reduce_sum(value, kPatient);
      EXPECT_TRUE(at::equal(value, at::full({3}, 10 + kWorld * round, at::kDouble))) << "round " << round;
      at::Tensor count = at::ones({2}, at::kLong);
      transport.all_reduce_sum(count, kPatient);
      EXPECT_TRUE(at::equal(count, at::full({2}, kWorld, at::kLong)));
    }
  });
}

TEST(LocalTransport, BarrierHoldsEveryRankUntilAllArrive) {
  constexpr int kWorld = 3;
  std::atomic<int> arrived{0};
  with_local(kWorld, [&](Transport& transport) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * transport.rank()));
    ++arrived;
    transport.barrier(kPatient);
    EXPECT_EQ(arrived.load(), kWorld);
  });
}

TEST(LocalTransport, CollectiveTimesOutNamingTheMissingRanks) {
  auto transports = make_local_transports(4);
  on_threads(2, [&](int rank) {
    EXPECT_EQ(error_of([&] { transports[rank]->all_reduce_sum(at::ones({1}), 100ms); }),
              "timed out after 100 ms in all_reduce_sum: ranks 2, 3 did not arrive");
  });
  // The timed-out ranks withdrew: a complete collective afterwards still sums correctly.
  on_threads(4, [&](int rank) {
    at::Tensor value = at::ones({1});
    transports[rank]->all_reduce_sum(value, kPatient);
    EXPECT_EQ(value.item<float>(), 4.0f);
  });
}

TEST(LocalTransport, MismatchedCollectivesFailEveryone) {
  auto transports = make_local_transports(2);
  std::promise<void> first_arrived;
  std::thread first([&] {
    first_arrived.set_value();
    EXPECT_NE(error_of([&] { transports[0]->all_reduce_sum(at::ones({3}), kPatient); }), "no error");
  });
  first_arrived.get_future().wait();
  std::this_thread::sleep_for(20ms);
  const std::string error = error_of([&] { transports[1]->barrier(kPatient); });
  first.join();
  EXPECT_NE(error.find("mismatched collectives"), std::string::npos) << error;
}

// ---------------------------------------------------------------------------------------------
// Gloo transport

TEST(GlooTransport, SendsEverySizeAndDtypeBothWays) {
  with_gloo(2, [](Transport& transport) {
    EXPECT_EQ(transport.backend(), "gloo");
    EXPECT_EQ(transport.world_size(), 2);
    const int peer = 1 - transport.rank();
    uint32_t tag = 0;
    for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kLong}) {
      for (int64_t numel : {int64_t{1}, int64_t{1000}, int64_t{1} << 20}) {
        for (int sender : {0, 1}) {
          ++tag;
          if (transport.rank() == sender) {
            transport.post_send(payload(numel, dtype, tag), peer, tag)->wait(kPatient);
          } else {
            at::Tensor received = at::zeros({numel}, dtype);
            transport.post_recv(received, peer, tag)->wait(kPatient);
            EXPECT_TRUE(at::equal(received, payload(numel, dtype, tag)))
                << c10::toString(dtype) << "[" << numel << "] from rank " << sender;
          }
        }
      }
    }
  });
}

TEST(GlooTransport, MatchesTagsPostedOutOfOrder) {
  with_gloo(2, [](Transport& transport) {
    const std::vector<uint32_t> send_order{1, 2, 3, 4, 5};
    const std::vector<uint32_t> recv_order{5, 3, 1, 4, 2};
    std::vector<at::Tensor> tensors;
    std::vector<std::unique_ptr<Transfer>> transfers;
    if (transport.rank() == 0) {
      for (uint32_t tag : send_order) {
        tensors.push_back(payload(1000 * tag, at::kFloat, tag));
        transfers.push_back(transport.post_send(tensors.back(), 1, tag));
      }
    } else {
      for (uint32_t tag : recv_order) {
        tensors.push_back(at::zeros({1000 * tag}, at::kFloat));
        transfers.push_back(transport.post_recv(tensors.back(), 0, tag));
      }
    }
    for (int index : {2, 0, 4, 1, 3}) transfers[index]->wait(kPatient);
    transfers[2]->wait(kPatient);  // a second wait on a completed transfer returns at once
    if (transport.rank() == 1) {
      for (size_t i = 0; i < recv_order.size(); ++i)
        EXPECT_TRUE(at::equal(tensors[i], payload(1000 * recv_order[i], at::kFloat, recv_order[i])))
            << "tag " << recv_order[i];
    }
  });
}

TEST(GlooTransport, ThreeRanksExchangeAroundARingAndReduce) {
  constexpr int kWorld = 3;
  with_gloo(kWorld, [](Transport& transport) {
    const int rank = transport.rank();
    const int next = (rank + 1) % kWorld;
    const int previous = (rank + kWorld - 1) % kWorld;
    at::Tensor received = at::zeros({4096}, at::kDouble);
    auto recv = transport.post_recv(received, previous, 11);
    auto send = transport.post_send(payload(4096, at::kDouble, rank), next, 11);
    send->wait(kPatient);
    recv->wait(kPatient);
    EXPECT_TRUE(at::equal(received, payload(4096, at::kDouble, previous)));

    for (at::ScalarType dtype : {at::kFloat, at::kDouble, at::kLong}) {
      at::Tensor value = at::full({5}, rank + 1, at::TensorOptions().dtype(dtype));
      transport.all_reduce_sum(value, kPatient);
      EXPECT_TRUE(at::equal(value, at::full({5}, 6, at::TensorOptions().dtype(dtype)))) << c10::toString(dtype);
    }
    transport.barrier(kPatient);
  });
}

TEST(GlooTransport, ReceiveWithoutSenderTimesOut) {
  const int port = free_port();
  std::latch gave_up(1);
  std::string error;
  std::string later_error;
  std::string peer_error;
  on_threads(2, [&](int rank) {
    auto transport = connect_loopback(rank, 2, port, kPatient);
    at::Tensor target = at::zeros({16});
    if (rank == 0) {
      gave_up.wait();  // stay connected, and silent, until rank 1 has given up
      peer_error = error_of([&] { transport->post_recv(target, 1, 3)->wait(2s); });
      return;
    }
    auto transfer = transport->post_recv(target, 0, 9);
    error = error_of([&] { transfer->wait(500ms); });
    // Gloo closes the whole context on a timeout: the group refuses further transfers...
    later_error = error_of([&] { transport->post_recv(target, 0, 10)->wait(500ms); });
    gave_up.count_down();
  });
  // The wait's own timeout fired (it names it), not the group's (kPatient).
  EXPECT_EQ(error, "Timed out waiting 500ms for recv operation to complete");
  EXPECT_EQ(later_error, "Application timeout caused pair closure");
  // ...and the peer finds its connection closed.
  EXPECT_TRUE(peer_gone(peer_error)) << peer_error;
}

TEST(GlooTransport, PeerGoneFailsPendingReceiveAtOnce) {
  const int port = free_port();
  std::latch posted(1);
  std::string error;
  on_threads(2, [&](int rank) {
    auto transport = connect_loopback(rank, 2, port, kPatient);
    if (rank == 0) {
      posted.wait();
      transport.reset();  // as if the process exited: its sockets close
      return;
    }
    at::Tensor target = at::zeros({16});
    auto transfer = transport->post_recv(target, 0, 4);
    posted.count_down();
    error = error_of([&] { transfer->wait(kPatient); });
  });
  // The closed connection ended the wait, not its timeout (which would say "Timed out waiting 20000ms").
  EXPECT_TRUE(peer_gone(error)) << error;
}

// A barrier of 3 ranks after `gone` has left (its transport destroyed, as when its process exits):
// what each of the others' barrier says.
std::vector<std::string> barrier_errors_after_leaving(int gone) {
  const int port = free_port();
  std::latch connected(3);
  std::vector<std::string> errors(3);
  on_threads(3, [&](int rank) {
    auto transport = connect_loopback(rank, 3, port, kPatient);
    connected.arrive_and_wait();
    if (rank == gone) {
      transport.reset();
      return;
    }
    errors[rank] = error_of([&] { transport->barrier(5s); });
  });
  return errors;
}

// Gloo's collectives do not name the peer they waited for; when rank 0 is the one gone, the others
// say so, because its store no longer answers. When another rank is gone, nobody blames rank 0.
TEST(GlooTransport, ACollectiveNamesRankZeroWhenItIsGone) {
  const std::vector<std::string> errors = barrier_errors_after_leaving(0);
  for (int rank : {1, 2}) {
    EXPECT_TRUE(errors[rank].starts_with("barrier: ")) << errors[rank];
    EXPECT_TRUE(errors[rank].ends_with("; rank 0, which hosts the rendezvous store, is gone")) << errors[rank];
  }
}

// Rank 2's connection to the store closed: the store itself says it is gone.
TEST(GlooTransport, ACollectiveNamesTheRankThatLeftInsteadOfRankZero) {
  const std::vector<std::string> errors = barrier_errors_after_leaving(2);
  for (int rank : {0, 1}) {
    EXPECT_TRUE(errors[rank].starts_with("barrier: ")) << errors[rank];
    EXPECT_TRUE(errors[rank].ends_with("; rank 2 is gone")) << errors[rank];
    EXPECT_EQ(errors[rank].find("rank 0, which hosts"), std::string::npos) << errors[rank];
  }
}

// A rank that is alive but silent (stuck in computation, stopped) makes the others time out; each
// rank marks the collectives it reaches, so they name it, however many collectives came before.
TEST(GlooTransport, ACollectiveNamesTheSilentRanks) {
  const int port = free_port();
  std::latch finished(2);
  std::vector<std::string> errors(4);
  on_threads(4, [&](int rank) {
    auto transport = connect_loopback(rank, 4, port, 3s);
    for (int round = 0; round < 3; ++round) transport->barrier(kPatient);
    if (rank == 1 || rank == 3) {
      finished.wait();  // silent: alive, its sockets open, but not in the collective
      return;
    }
    errors[rank] = error_of([&] { transport->all_reduce_sum(at::ones({2}), 300ms); });
    finished.count_down();
  });
  for (int rank : {0, 2}) EXPECT_EQ(errors[rank], "all_reduce_sum: Operation timed out!; ranks 1, 3 did not arrive");
}

// The peer as a real process that dies by SIGKILL, as `FaultInjection` does it: the kernel closes its
// sockets. The child is this test binary again, running only the disabled helper below.
TEST(GlooTransport, KilledPeerProcessFailsPendingReceiveAtOnce) {
  const int port = free_port();
  const std::string filter = "--gtest_filter=GlooTransportChild.DISABLED_ConnectsThenDies";
  const std::string port_variable = "FLEXPIPE_TRANSPORT_CHILD_PORT=" + std::to_string(port);
  std::vector<char*> argv{const_cast<char*>("/proc/self/exe"), const_cast<char*>(filter.c_str()),
                          const_cast<char*>("--gtest_also_run_disabled_tests"), nullptr};
  std::vector<char*> envp{const_cast<char*>(port_variable.c_str())};
  for (char** variable = environ; *variable != nullptr; ++variable) envp.push_back(*variable);
  envp.push_back(nullptr);
  // The child's own test report would interleave with ours.
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t child = 0;
  const int spawned = ::posix_spawn(&child, "/proc/self/exe", &quiet, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&quiet);
  ASSERT_EQ(spawned, 0);

  auto transport = connect_gloo(loopback_env(0, 2, port), kPatient);
  at::Tensor target = at::zeros({16});
  // The child may already be gone when the receive is posted: then posting fails, not waiting. Either
  // way the closed connection ends it, not the wait's timeout.
  const std::string error = error_of([&] { transport->post_recv(target, 1, 1)->wait(kPatient); });
  EXPECT_TRUE(peer_gone(error)) << error;
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
}

TEST(GlooTransportChild, DISABLED_ConnectsThenDies) {
  const char* port = std::getenv("FLEXPIPE_TRANSPORT_CHILD_PORT");
  if (port == nullptr) GTEST_SKIP() << "runs only as the child of KilledPeerProcessFailsPendingReceiveAtOnce";
  auto transport = connect_gloo(loopback_env(1, 2, std::atoi(port)), kPatient);
  std::this_thread::sleep_for(100ms);  // let the parent post its receive
  ::raise(SIGKILL);
}

TEST(GlooTransport, AllReduceHonoursItsTimeout) {
  const int port = free_port();
  std::promise<void> gave_up;
  std::future<void> rank_0_gave_up = gave_up.get_future();
  std::string error;
  on_threads(2, [&](int rank) {
    // The group's own timeout (5 s) bounds how long Gloo keeps the abandoned collective running.
    auto transport = connect_loopback(rank, 2, port, 5s);
    if (rank == 1) {
      // Late, but within the group's timeout: had rank 0 waited for that rather than its 300 ms, the
      // collective would complete now and rank 0 would report no error.
      if (rank_0_gave_up.wait_for(2s) == std::future_status::timeout)
        error_of([&] { transport->all_reduce_sum(at::ones({4}), 5s); });
      return;
    }
    error = error_of([&] { transport->all_reduce_sum(at::ones({4}), 300ms); });
    gave_up.set_value();
  });
  EXPECT_EQ(error, "all_reduce_sum: Operation timed out!; rank 1 did not arrive");
}

TEST(GlooTransport, RejectsBadPostsAndStaysUsable) {
  with_gloo(2, [](Transport& transport) {
    const int peer = 1 - transport.rank();
    EXPECT_EQ(error_of([&] { transport.post_send(at::ones({2}), transport.rank(), 1); }),
              "cannot send tag 1 to/from rank " + std::to_string(transport.rank()) +
                  ": peers are the other ranks of 0..1");
    EXPECT_EQ(error_of([&] { transport.post_send(at::ones({2}), peer, 0x80000000u); }),
              "tag 2147483648 is too large (Gloo tags are at most 2^31-1)");
    EXPECT_EQ(error_of([&] {
                transport.post_recv(at::ones({4, 4}).t(), peer, 1);
              }),
              "cannot receive tag 1: the tensor must be defined, contiguous and on the CPU");
    transport.barrier(kPatient);
  });
}

TEST(GlooTransport, RendezvousTimesOutWhenARankNeverShowsUp) {
  const int port = free_port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::vector<std::string> errors(2);
  // A world of 3 where rank 2 never starts.
  on_threads(2, [&](int rank) { errors[rank] = error_of([&] { connect_loopback(rank, 3, port, 1s); }); });
  EXPECT_EQ(errors[0],
            "rendezvous at " + address + " timed out after 1000 ms: rank 2 of 3 never joined (seen from rank 0)");
  // Rank 1 started later, so rank 0's deadline usually comes first and its store goes with it.
  const bool saw_timeout = errors[1].find("rank 2 of 3 never joined (seen from rank 1)") != std::string::npos;
  const bool lost_store =
      errors[1].find("rank 1 lost the store (has rank 0, its host, given up or exited?)") != std::string::npos;
  EXPECT_TRUE(errors[1].starts_with("rendezvous at " + address) && (saw_timeout || lost_store)) << errors[1];
}

TEST(GlooTransport, ClientStartedBeforeTheStoreRetries) {
  const int port = free_port();
  on_threads(2, [&](int rank) {
    if (rank == 0) std::this_thread::sleep_for(300ms);
    auto transport = connect_gloo(loopback_env(rank, 2, port), kPatient);
    transport->barrier(kPatient);
  });
}

TEST(GlooTransport, ClientGivesUpWhenNoStoreListens) {
  const int port = free_port();
  const std::string error = error_of([&] { connect_gloo(loopback_env(1, 2, port), 1s); });
  EXPECT_NE(error.find("rendezvous at 127.0.0.1:" + std::to_string(port) +
                       " failed: rank 1 waited up to 1000 ms to reach rank 0's store"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace flexpipe::runtime
