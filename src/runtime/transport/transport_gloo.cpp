// The Gloo transport: the rendezvous store (bound to MASTER_ADDR, or torchrun's agent's), ProcessGroupGloo
// over TCP for the tensors, on the interface network_interface.h chooses.
// The only file of the library that includes c10d (each of its headers costs seconds per TU).
//
// What c10d / Gloo do that shapes this file (1.13 and 2.11 alike; tests/runtime/transport_test.cpp pins each):
// - SendWork/RecvWork::wait(timeout) throws gloo::IoException after `timeout`. A timeout of 0 means
//   "no timeout" to c10d (it then waits for the process group's own timeout), hence the 1 ms floor.
// - A timed-out wait closes every pair of the Gloo context ("Application timeout caused pair
//   closure"): the group is unusable afterwards and the peers see their connections close. A timeout
//   is therefore fatal to the job, which is what the executor does with it anyway.
// - A peer whose process exits closes its sockets; pending transfers to or from it fail at once with
//   "Connection closed by peer [addr]:port" instead of waiting for their timeout.
// - A second wait() on a completed SendWork/RecvWork would wait for a second completion, so the
//   Transfer remembers its outcome.
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "transport/network_interface.h"
#include "transport/rendezvous_store.h"
#include "transport/transport.h"

namespace flexpipe::runtime {

namespace {

// The backend's own sentence, without what only its developers need: c10::Error::what() appends a
// C++ backtrace, and Gloo prefixes "[./gloo/transport/tcp/pair.cc:598] ".
std::string backend_message(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : error.what();
  if (text.starts_with("[")) {
    const size_t close = text.find("] ");
    if (close != std::string::npos && text.find(':') < close) text.erase(0, close + 2);
  }
  return text;
}

// c10d treats a zero timeout as "none" (wait for the group's default); a caller asking for 0 wants
// the opposite, so the shortest wait c10d can express stands in.
std::chrono::milliseconds c10d_timeout(std::chrono::milliseconds timeout) {
  return std::max(timeout, std::chrono::milliseconds(1));
}

// Gloo writes with writev(), which raises SIGPIPE when the peer's socket is closed. The default action
// would kill this process silently (exit status 141) instead of failing the transfer with
// "Connection closed by peer"; a handler someone installed on purpose is left alone.
void ignore_sigpipe() {
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// Gloo listens on the chosen address only (a loopback master's job: on loopback only). One line per
// node says which, from its first rank, when the choice is not the obvious one: the job spans nodes,
// the master is not on loopback, or GLOO_SOCKET_IFNAME chose.
std::shared_ptr<::gloo::transport::Device> make_device(const RankEnv& env) {
  const InterfaceChoice choice = choose_interface(env.master_addr, env.master_port);
  const bool obvious = env.world_size == env.local_world_size && choice.address.starts_with("127.") &&
                       choice.reason != "GLOO_SOCKET_IFNAME";
  if (env.local_rank == 0 && !obvious) {
    fmt::print(stderr, "node {} ({}): Gloo uses interface {} ({}), chosen by {}\n", env.node_rank, host_name(),
               choice.name.empty() ? "?" : choice.name, choice.address, choice.reason);
    std::fflush(stderr);
  }
  return c10d::ProcessGroupGloo::createDeviceForHostname(choice.address);
}

using Clock = std::chrono::steady_clock;

// Under torchrun the agent hosts c10d's TCPStore on MASTER_ADDR:MASTER_PORT already: rank 0 hosting a
// second one there would fail ("Address already in use"), so every rank connects to the agent's.
c10::intrusive_ptr<c10d::Store> connect_agent_store(const RankEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(env.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
}

// The store the ranks meet through: `shared` prefixed (to keep our keys and Gloo's apart), and `own`,
// the same store unprefixed when it is ours (rendezvous_store.h) rather than torchrun's agent's.
struct Stores {
  c10::intrusive_ptr<c10d::Store> shared;
  c10::intrusive_ptr<RendezvousStore> own;
};

// Rank 0 hosts the store on MASTER_ADDR:MASTER_PORT and nothing else (rendezvous_store.h); the others
// connect to it, retrying while it is not listening yet, for up to `timeout`, and say which rank they
// are, so that the store can tell the survivors who left.
Stores open_store(const RankEnv& env, const std::string& address, std::chrono::milliseconds timeout) {
  try {
    Stores stores;
    if (env.agent_store) {
      stores.shared = c10::make_intrusive<c10d::PrefixStore>("flexpipe", connect_agent_store(env, timeout));
      return stores;
    }
    if (env.rank == 0) {
      stores.own = RendezvousStore::host(env.master_addr, env.master_port, timeout);
    } else {
      stores.own = RendezvousStore::connect(env.master_addr, env.master_port, timeout);
      stores.own->identify(env.rank);
    }
    stores.shared = c10::make_intrusive<c10d::PrefixStore>("flexpipe", stores.own);
    return stores;
  } catch (const std::exception& error) {
    if (env.agent_store)
      throw TransportError(
          fmt::format("rendezvous at {} failed: rank {} could not reach torchrun's store there "
                      "(TORCHELASTIC_USE_AGENT_STORE=True): {}",
                      address, env.rank, backend_message(error)));
    if (env.rank == 0)
      throw TransportError(fmt::format("rendezvous at {} failed: rank 0 could not host the store there: {}", address,
                                       backend_message(error)));
    throw TransportError(fmt::format("rendezvous at {} failed: rank {} waited up to {} ms to reach rank 0's store: {}",
                                     address, env.rank, timeout.count(), backend_message(error)));
  }
}

// Every rank announces itself, then waits until all have. c10d 1.13's waitWorkers gave up silently
// on the server after its timeout and left a bare "Socket Timeout" to the group's constructor;
// this says which ranks never came. Polling check() rather than a blocking wait() keeps the client
// usable after a timeout (an abandoned wait's late reply would desynchronise its socket).
void check_in(c10d::Store& store, const RankEnv& env, const std::string& address, std::chrono::milliseconds timeout) {
  std::vector<std::string> keys;
  for (int rank = 0; rank < env.world_size; ++rank) keys.push_back(fmt::format("joined/{}", rank));
  const auto deadline = Clock::now() + timeout;
  try {
    const std::string node = fmt::format("node {} ({})", env.node_rank, host_name());
    store.set(fmt::format("node/{}", env.rank), std::vector<uint8_t>(node.begin(), node.end()));
    store.set(keys[env.rank], std::vector<uint8_t>{1});
    while (!store.check(keys)) {
      if (Clock::now() >= deadline) {
        std::vector<int> missing;
        for (int rank = 0; rank < env.world_size; ++rank)
          if (!store.check({keys[rank]})) missing.push_back(rank);
        std::string list;
        for (int rank : missing) list += fmt::format("{}{}", list.empty() ? "" : ", ", rank);
        throw TransportError(
            fmt::format("rendezvous at {} timed out after {} ms: rank{} {} of {} never joined (seen from "
                        "rank {})",
                        address, timeout.count(), missing.size() > 1 ? "s" : "", list, env.world_size, env.rank));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const TransportError&) {
    throw;
  } catch (const std::exception& error) {
    // Mostly rank 0 having given up (its deadline came first) and taken its store with it.
    throw TransportError(
        fmt::format("rendezvous at {} failed: rank {} lost the store (has rank 0, its host, given "
                    "up or exited?): {}",
                    address, env.rank, backend_message(error)));
  }
}

// Where every rank runs, as each published it at check-in ("node 1 (host)"): set after check-in, so
// every key is there. Empty when the whole job runs on one node, where naming it adds nothing.
std::vector<std::string> read_nodes(c10d::Store& store, const RankEnv& env) {
  std::vector<std::string> nodes;
  for (int rank = 0; rank < env.world_size; ++rank) {
    const std::vector<uint8_t> value = store.get(fmt::format("node/{}", rank));
    nodes.emplace_back(value.begin(), value.end());
  }
  if (std::all_of(nodes.begin(), nodes.end(), [&](const std::string& node) { return node == nodes[0]; })) nodes.clear();
  return nodes;
}

class GlooTransfer final : public Transfer {
 public:
  // `blame`: what the failure message ends with, asked for only when it fails (it may wait a moment).
  GlooTransfer(c10::intrusive_ptr<c10d::Work> work, std::function<std::string()> blame)
      : work_(std::move(work)), blame_(std::move(blame)) {}

  void wait(std::chrono::milliseconds timeout) override {
    if (done_) return;
    if (!error_.empty()) throw TransportError(error_);
    try {
      if (!work_->wait(c10d_timeout(timeout))) error_ = "the transfer was aborted";
    } catch (const std::exception& error) {
      error_ = backend_message(error) + blame_();
    }
    if (!error_.empty()) throw TransportError(error_);
    done_ = true;
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;  // holds the tensor and Gloo's buffer until it completes
  std::function<std::string()> blame_;
  bool done_ = false;
  std::string error_;
};

class GlooTransport final : public Transport {
 public:
  GlooTransport(const RankEnv& env, Stores stores, c10::intrusive_ptr<c10d::ProcessGroupGloo> group,
                std::vector<std::string> nodes)
      : env_(env),
        store_(std::move(stores.shared)),
        own_store_(std::move(stores.own)),
        group_(std::move(group)),
        nodes_(std::move(nodes)) {}

  int rank() const override { return env_.rank; }
  int world_size() const override { return env_.world_size; }
  std::string backend() const override { return "gloo"; }

  std::unique_ptr<Transfer> post_send(const at::Tensor& tensor, int peer, uint32_t tag) override {
    return post(tensor, peer, tag, /*is_send=*/true);
  }
  std::unique_ptr<Transfer> post_recv(const at::Tensor& tensor, int peer, uint32_t tag) override {
    return post(tensor, peer, tag, /*is_send=*/false);
  }

  void all_reduce_sum(const at::Tensor& tensor, std::chrono::milliseconds timeout) override {
    if (!tensor.defined() || !tensor.is_contiguous() || !tensor.is_cpu())
      throw TransportError("all_reduce_sum needs a defined, contiguous CPU tensor");
    all_reduce(tensor, "all_reduce_sum", timeout);
  }

  // ProcessGroupGloo::barrier would do, but an allreduce is the same rendezvous with one code path less.
  void barrier(std::chrono::milliseconds timeout) override { all_reduce(at::zeros({1}), "barrier", timeout); }

 private:
  std::unique_ptr<Transfer> post(const at::Tensor& tensor, int peer, uint32_t tag, bool is_send) {
    const char* what = is_send ? "send" : "receive";
    if (peer < 0 || peer >= env_.world_size || peer == env_.rank)
      throw TransportError(fmt::format("cannot {} tag {} to/from rank {}: peers are the other ranks of 0..{}", what,
                                       tag, peer, env_.world_size - 1));
    // c10d takes an int tag and rejects negative ones.
    if (tag > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()))
      throw TransportError(fmt::format("tag {} is too large (Gloo tags are at most 2^31-1)", tag));
    if (!tensor.defined() || !tensor.is_contiguous() || !tensor.is_cpu())
      throw TransportError(
          fmt::format("cannot {} tag {}: the tensor must be defined, contiguous and on the CPU", what, tag));
    std::vector<at::Tensor> tensors{tensor};
    try {
      auto work = is_send ? group_->send(tensors, peer, static_cast<int>(tag))
                          : group_->recv(tensors, peer, static_cast<int>(tag));
      return std::make_unique<GlooTransfer>(std::move(work), [this, peer] { return blame(peer); });
    } catch (const std::exception& error) {
      // A group closed by an earlier failure refuses new transfers here, at posting time.
      throw TransportError(backend_message(error));
    }
  }

  // " (rank 3 runs on node 1 (host))", for messages about a peer; empty on a single node.
  std::string place_of(int rank) const {
    if (nodes_.empty()) return "";
    return fmt::format(" (rank {} runs on {})", rank, nodes_[static_cast<size_t>(rank)]);
  }

  // What a failed transfer with `peer` ends with: where the peer runs, and which other ranks are gone
  // (a peer's connection may close because a third rank died and its own transfers failed).
  std::string blame(int peer) const {
    std::vector<int> gone = ranks_gone();
    std::erase(gone, peer);
    return place_of(peer) + describe_gone(gone);
  }

  // The ranks whose connection to rank 0's store closed: their processes are gone (not known under
  // torchrun's store). The server notices a closed connection only once it reads it, so the store
  // is asked for a moment.
  std::vector<int> ranks_gone() const {
    if (!own_store_) return {};
    for (int attempt = 0; attempt < 20; ++attempt) {
      std::vector<int> gone;
      try {
        for (int rank = 1; rank < env_.world_size; ++rank)
          if (rank != env_.rank && own_store_->check({RendezvousStore::gone_key(rank)})) gone.push_back(rank);
      } catch (const std::exception&) {
        return {};  // the store itself is gone: rank 0, which whether_rank_zero_is_gone() names
      }
      if (!gone.empty()) return gone;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return {};
  }

  std::string describe_gone(const std::vector<int>& gone) const {
    if (gone.empty()) return "";
    std::string places;
    for (int rank : gone) places += place_of(rank);
    return fmt::format("; {} {} {} gone{}", gone.size() == 1 ? "rank" : "ranks", fmt::join(gone, ", "),
                       gone.size() == 1 ? "is" : "are", places);
  }

  // c10d's collective timeout says only "Operation timed out!", so the collective's name goes first,
  // and the ranks that never reached it after.
  void all_reduce(const at::Tensor& tensor, const char* what, std::chrono::milliseconds timeout) {
    std::vector<at::Tensor> tensors{tensor};
    const int64_t collective = ++collectives_;
    mark_arrival(collective);
    try {
      group_->allreduce(tensors)->wait(c10d_timeout(timeout));
    } catch (const std::exception& error) {
      std::string blame = whether_rank_zero_is_gone();
      if (blame.empty()) blame = describe_gone(ranks_gone());
      if (blame.empty()) blame = ranks_that_did_not_arrive(collective);
      throw TransportError(fmt::format("{}: {}{}", what, backend_message(error), blame));
    }
  }

  // Every rank runs the same collectives in the same order, so the n-th is the same on all of them.
  // Each rank overwrites one store key with the number of the last collective it reached: one small
  // write per collective, and the store's size stays constant however long the run.
  static std::string arrival_key(int rank) { return fmt::format("arrived/{}", rank); }

  void mark_arrival(int64_t collective) {
    try {
      store_->set(arrival_key(env_.rank), std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&collective),
                                                               reinterpret_cast<const uint8_t*>(&collective + 1)));
    } catch (const std::exception&) {
      // The store gone is rank 0 gone, which the collective itself will report.
    }
  }

  std::string ranks_that_did_not_arrive(int64_t collective) const {
    std::vector<int> absent;
    try {
      for (int rank = 0; rank < env_.world_size; ++rank) {
        if (rank == env_.rank) continue;
        int64_t reached = 0;
        if (store_->check({arrival_key(rank)})) {
          const std::vector<uint8_t> value = store_->get(arrival_key(rank));
          if (value.size() == sizeof reached) std::memcpy(&reached, value.data(), sizeof reached);
        }
        if (reached < collective) absent.push_back(rank);
      }
    } catch (const std::exception&) {
      return "";
    }
    if (absent.empty()) return "";
    std::string places;
    for (int rank : absent) places += place_of(rank);
    return fmt::format("; {} {} did not arrive{}", absent.size() == 1 ? "rank" : "ranks", fmt::join(absent, ", "),
                       places);
  }

  // Gloo's collectives do not say which peer they waited for. One can be named without a cost on
  // the way there: rank 0 serves the store in its own process, and its store answers as long as that
  // process lives (the server is a thread of its own, so a rank 0 stuck in computation still answers).
  // A process's sockets do not all close at the same instant, so the store is asked for a moment.
  std::string whether_rank_zero_is_gone() const {
    if (env_.rank == 0 || env_.agent_store) return "";  // torchrun's agent, not rank 0, serves its store
    for (int attempt = 0; attempt < 20; ++attempt) {
      try {
        store_->check({"probe"});
      } catch (const std::exception&) {
        return "; rank 0, which hosts the rendezvous store, is gone" + place_of(0);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "";
  }

  RankEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;          // kept for the group's lifetime; rank 0's also serves the others
  c10::intrusive_ptr<RendezvousStore> own_store_;  // the same, unprefixed, when ours (not torchrun's)
  int64_t collectives_ = 0;                        // collectives this rank has entered
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group_;
  std::vector<std::string> nodes_;  // where each rank runs (read_nodes), for messages
};

}  // namespace

std::unique_ptr<Transport> connect_gloo(const RankEnv& env, std::chrono::milliseconds timeout) {
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size)
    throw TransportError(fmt::format("rank {} is out of range for a world of {} ranks", env.rank, env.world_size));
  if (env.master_port < 1 || env.master_port > 65535)
    throw TransportError(fmt::format("master port {} is out of range (1..65535)", env.master_port));
  ignore_sigpipe();
  const std::string address = fmt::format("{}:{}", env.master_addr, env.master_port);
  const auto device = make_device(env);
  Stores stores = open_store(env, address, timeout);
  check_in(*stores.shared, env, address, timeout);
  try {
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    options->devices.push_back(device);
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(stores.shared, env.rank, env.world_size, options);
    // Nobody returns before everyone is connected: rank 0 hosts the store, and a rank 0 that raced
    // ahead and exited would pull it from under ranks still reading their peers' addresses.
    std::vector<at::Tensor> token{at::zeros({1})};
    group->allreduce(token)->wait(c10d_timeout(timeout));
    std::vector<std::string> nodes = read_nodes(*stores.shared, env);
    return std::make_unique<GlooTransport>(env, std::move(stores), std::move(group), std::move(nodes));
  } catch (const std::exception& error) {
    throw TransportError(
        fmt::format("connecting the Gloo group of {} ranks through the store at {} failed: rank {} "
                    "waited up to {} ms for the others' addresses and connections: {}",
                    env.world_size, address, env.rank, timeout.count(), backend_message(error)));
  }
}

}  // namespace flexpipe::runtime
