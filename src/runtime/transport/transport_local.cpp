// In-process transport: `world_size` endpoints, one per thread, that meet in a shared hub. It keeps
// Gloo's semantics where they matter to a schedule: a send completes only once the matching receive
// is posted (so a schedule that would deadlock over sockets deadlocks, and times out, here too), and
// tags match per (sender, receiver) regardless of posting order.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include "transport/transport.h"

namespace flexpipe::runtime {

namespace {

using Clock = std::chrono::steady_clock;

std::string describe(const at::Tensor& tensor) {
  std::ostringstream text;
  text << tensor.scalar_type() << tensor.sizes();
  return text.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += fmt::format("{}{}", text.empty() ? "" : ", ", rank);
  return text;
}

// One posted send or receive. Shared by its Transfer and the hub's mailbox until it is matched.
struct Op {
  enum class State { Pending, Copying, Done, Failed };
  bool is_send = false;
  int src = 0;
  int dst = 0;
  uint32_t tag = 0;
  at::Tensor tensor;
  State state = State::Pending;
  std::string error;
};
using OpPtr = std::shared_ptr<Op>;
using MailboxKey = std::tuple<int, int, uint32_t>;  // (src, dst, tag)

class Hub {
 public:
  explicit Hub(int world_size)
      : world_size_(world_size), closed_(world_size, false), inputs_(world_size), arrived_flags_(world_size, false) {}

  int world_size() const { return world_size_; }

  void post(const OpPtr& op) {
    std::unique_lock lock(mutex_);
    const int peer = op->is_send ? op->dst : op->src;
    if (closed_[peer]) {
      fail(*op, closed_message(*op, peer));
      return;
    }
    auto& waiting = op->is_send ? recvs_ : sends_;
    const MailboxKey key{op->src, op->dst, op->tag};
    const auto match = waiting.find(key);
    if (match == waiting.end()) {
      (op->is_send ? sends_ : recvs_)[key].push_back(op);
      return;
    }
    OpPtr other = match->second.front();
    match->second.pop_front();
    if (match->second.empty()) waiting.erase(match);
    const OpPtr& send = op->is_send ? op : other;
    const OpPtr& recv = op->is_send ? other : op;
    send->state = recv->state = Op::State::Copying;
    // Copy outside the lock: a 16 MiB copy should not stall every other rank's bookkeeping.
    lock.unlock();
    std::string error;
    if (send->tensor.scalar_type() != recv->tensor.scalar_type() || send->tensor.numel() != recv->tensor.numel()) {
      error = fmt::
          format("mismatched transfer of tag {} from rank {} to rank {}: sent {} but the receive was posted for {}",
                 send->tag, send->src, send->dst, describe(send->tensor), describe(recv->tensor));
    } else {
      try {
        recv->tensor.view({-1}).copy_(send->tensor.view({-1}));
      } catch (const std::exception& copy_error) {
        error = fmt::format("copying tag {} from rank {} to rank {} failed: {}", send->tag, send->src, send->dst,
                            copy_error.what());
      }
    }
    lock.lock();
    for (const OpPtr& done : {send, recv}) {
      if (error.empty())
        done->state = Op::State::Done;
      else
        fail(*done, error);
    }
    changed_.notify_all();
  }

  // Throws TransportError on failure or when nothing matched `op` before the deadline.
  void wait(const OpPtr& op, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!changed_.wait_until(lock, Clock::now() + timeout, [&] { return op->state != Op::State::Pending; })) {
      withdraw(op);
      fail(*op, op->is_send ? fmt::format("timed out after {} ms waiting for rank {} to receive tag {}",
                                          timeout.count(), op->dst, op->tag)
                            : fmt::format("timed out after {} ms waiting to receive tag {} from rank {}",
                                          timeout.count(), op->tag, op->src));
    }
    // A matched transfer is mid-copy: that finishes in bounded time, so the timeout no longer applies.
    changed_.wait(lock, [&] { return op->state == Op::State::Done || op->state == Op::State::Failed; });
    if (op->state == Op::State::Failed) throw TransportError(op->error);
  }

  // A Transfer dropped without wait(): forget it, or let a running copy into its tensor finish.
  void release(const OpPtr& op) {
    std::unique_lock lock(mutex_);
    if (op->state == Op::State::Pending) withdraw(op);
    changed_.wait(lock, [&] { return op->state != Op::State::Copying; });
  }

  // The endpoint of `rank` is gone: everything that waits on it fails now rather than at its timeout,
  // as a Gloo peer sees "connection closed" when a process exits.
  void close(int rank) {
    std::lock_guard lock(mutex_);
    closed_[rank] = true;
    for (auto* mailbox : {&sends_, &recvs_}) {
      for (auto entry = mailbox->begin(); entry != mailbox->end();) {
        const auto& [src, dst, tag] = entry->first;
        if (src != rank && dst != rank) {
          ++entry;
          continue;
        }
        for (const OpPtr& op : entry->second) fail(*op, closed_message(*op, rank));
        entry = mailbox->erase(entry);
      }
    }
    if (arrived_ > 0) fail_collective(fmt::format("rank {} closed its transport during {}", rank, kind_));
    changed_.notify_all();
  }

  // all_reduce_sum (tensor defined) and barrier (tensor undefined): every rank arrives, the last one
  // sums in rank order (so the result does not depend on arrival order) and writes every rank's tensor.
  void collective(int rank, const at::Tensor& tensor, const std::string& kind, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    for (int peer = 0; peer < world_size_; ++peer)
      if (closed_[peer] && peer != rank)
        throw TransportError(fmt::format("{}: rank {} closed its transport", kind, peer));
    if (arrived_ == 0) {
      kind_ = kind;
      reference_ = tensor;
    } else if (kind != kind_ || tensor.defined() != reference_.defined() ||
               (tensor.defined() &&
                (tensor.scalar_type() != reference_.scalar_type() || tensor.numel() != reference_.numel()))) {
      const std::string error = fmt::format("mismatched collectives: rank {} called {}{} while others are in {}{}",
                                            rank, kind, tensor.defined() ? " of " + describe(tensor) : "", kind_,
                                            reference_.defined() ? " of " + describe(reference_) : "");
      fail_collective(error);
      throw TransportError(error);
    }
    inputs_[rank] = tensor;
    arrived_flags_[rank] = true;
    ++arrived_;
    const uint64_t generation = generation_;
    if (arrived_ == world_size_) {
      if (tensor.defined()) {
        at::Tensor sum = inputs_[0].clone();
        for (int peer = 1; peer < world_size_; ++peer) sum.add_(inputs_[peer]);
        for (const at::Tensor& target : inputs_) target.copy_(sum);
      }
      finish_collective();
      return;
    }
    if (!changed_.wait_until(lock, Clock::now() + timeout, [&] { return generation_ != generation; })) {
      std::vector<int> missing;
      for (int peer = 0; peer < world_size_; ++peer)
        if (!arrived_flags_[peer]) missing.push_back(peer);
      // Fatal for everyone already waiting, as a Gloo timeout closes the group: they learn why now
      // instead of each timing out on its own and blaming the rank that gave up first.
      fail_collective(fmt::format("timed out after {} ms in {}: rank{} {} did not arrive", timeout.count(), kind,
                                  missing.size() > 1 ? "s" : "", rank_list(missing)));
    }
    if (failed_generation_ == generation) throw TransportError(failure_);
  }

 private:
  static std::string closed_message(const Op& op, int closed_rank) {
    if (closed_rank == (op.is_send ? op.src : op.dst))
      return fmt::format("the transport of rank {} was closed with tag {} pending", closed_rank, op.tag);
    return op.is_send ? fmt::format("rank {} closed its transport before receiving tag {}", closed_rank, op.tag)
                      : fmt::format("rank {} closed its transport before sending tag {}", closed_rank, op.tag);
  }

  static void fail(Op& op, std::string error) {
    op.state = Op::State::Failed;
    op.error = std::move(error);
  }

  void withdraw(const OpPtr& op) {
    auto& mailbox = op->is_send ? sends_ : recvs_;
    const auto entry = mailbox.find({op->src, op->dst, op->tag});
    if (entry == mailbox.end()) return;
    auto& queue = entry->second;
    queue.erase(std::remove(queue.begin(), queue.end(), op), queue.end());
    if (queue.empty()) mailbox.erase(entry);
  }

  void fail_collective(std::string error) {
    failed_generation_ = generation_;
    failure_ = std::move(error);
    finish_collective();
  }

  void finish_collective() {
    ++generation_;
    arrived_ = 0;
    std::fill(arrived_flags_.begin(), arrived_flags_.end(), false);
    std::fill(inputs_.begin(), inputs_.end(), at::Tensor());
    reference_ = at::Tensor();
    changed_.notify_all();
  }

  const int world_size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<MailboxKey, std::deque<OpPtr>> sends_;  // posted, not yet matched; FIFO per key
  std::map<MailboxKey, std::deque<OpPtr>> recvs_;
  std::vector<bool> closed_;

  // The collective in progress; generation_ counts finished ones so waiters know theirs is over.
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::string kind_;
  at::Tensor reference_;            // the first arrival's tensor, to check the others against
  std::vector<at::Tensor> inputs_;  // by rank; undefined for a barrier
  std::vector<bool> arrived_flags_;
  uint64_t failed_generation_ = std::numeric_limits<uint64_t>::max();
  std::string failure_;
};

class LocalTransfer final : public Transfer {
 public:
  LocalTransfer(std::shared_ptr<Hub> hub, OpPtr op) : hub_(std::move(hub)), op_(std::move(op)) {}
  ~LocalTransfer() override {
    if (!waited_) hub_->release(op_);
  }

  void wait(std::chrono::milliseconds timeout) override {
    waited_ = true;
    hub_->wait(op_, timeout);
  }

 private:
  std::shared_ptr<Hub> hub_;
  OpPtr op_;
  bool waited_ = false;
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}
  ~LocalTransport() override { hub_->close(rank_); }

  int rank() const override { return rank_; }
  int world_size() const override { return hub_->world_size(); }
  std::string backend() const override { return "local"; }

  std::unique_ptr<Transfer> post_send(const at::Tensor& tensor, int peer, uint32_t tag) override {
    return post(tensor, peer, tag, /*is_send=*/true);
  }
  std::unique_ptr<Transfer> post_recv(const at::Tensor& tensor, int peer, uint32_t tag) override {
    return post(tensor, peer, tag, /*is_send=*/false);
  }

  void all_reduce_sum(const at::Tensor& tensor, std::chrono::milliseconds timeout) override {
    if (!tensor.defined() || !tensor.is_contiguous() || !tensor.is_cpu())
      throw TransportError("all_reduce_sum needs a defined, contiguous CPU tensor");
    hub_->collective(rank_, tensor, "all_reduce_sum", timeout);
  }
  void barrier(std::chrono::milliseconds timeout) override {
    hub_->collective(rank_, at::Tensor(), "barrier", timeout);
  }

 private:
  std::unique_ptr<Transfer> post(const at::Tensor& tensor, int peer, uint32_t tag, bool is_send) {
    const char* what = is_send ? "send" : "receive";
    // The same limits as the Gloo transport, so a test on threads catches what would fail over sockets.
    if (peer < 0 || peer >= world_size() || peer == rank_)
      throw TransportError(fmt::format("cannot {} tag {} to/from rank {}: peers are the other ranks of 0..{}", what,
                                       tag, peer, world_size() - 1));
    if (tag > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()))
      throw TransportError(fmt::format("tag {} is too large (Gloo tags are at most 2^31-1)", tag));
    if (!tensor.defined() || !tensor.is_contiguous() || !tensor.is_cpu())
      throw TransportError(
          fmt::format("cannot {} tag {}: the tensor must be defined, contiguous and on the CPU", what, tag));
    auto op = std::make_shared<Op>();
    op->is_send = is_send;
    op->src = is_send ? rank_ : peer;
    op->dst = is_send ? peer : rank_;
    op->tag = tag;
    op->tensor = tensor;
    hub_->post(op);
    return std::make_unique<LocalTransfer>(hub_, std::move(op));
  }

  std::shared_ptr<Hub> hub_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Transport>> make_local_transports(int world_size) {
  if (world_size < 1) throw TransportError(fmt::format("a local transport needs at least 1 rank, not {}", world_size));
  auto hub = std::make_shared<Hub>(world_size);
  std::vector<std::unique_ptr<Transport>> transports;
  for (int rank = 0; rank < world_size; ++rank) transports.push_back(std::make_unique<LocalTransport>(hub, rank));
  return transports;
}

std::unique_ptr<Transport> connect_local(const RankEnv& env, std::chrono::milliseconds /*timeout*/) {
  if (env.world_size != 1)
    throw TransportError(
        fmt::format("the local transport joins the threads of one process, not a job of {} processes", env.world_size));
  return std::move(make_local_transports(1)[0]);
}

}  // namespace flexpipe::runtime
