// The narrow interface the executor talks through: post a send, post a receive, wait. Backends
// (Gloo over TCP via c10d, in-process queues for one rank and for tests) live behind it, each
// connected by name through transport_registry.h.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "flexpipe/train/rank_env.h"

namespace flexpipe::runtime {

// A transfer failed, timed out or its peer went away. what() says which, in the backend's words.
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One posted send or receive. The tensor passed to post_* must stay alive until wait() returns.
class Transfer {
 public:
  virtual ~Transfer() = default;
  // Blocks until done; throws TransportError on failure or after `timeout`.
  virtual void wait(std::chrono::milliseconds timeout) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;  // "gloo", "nccl", "local"
  // The job-wide rank of `peer` (a group view's peers are positions in its group), for messages.
  virtual int global_rank(int peer) const { return peer; }
  // `tensor` must be contiguous. Tags are unique per (sender, receiver) among pending transfers.
  virtual std::unique_ptr<Transfer> post_send(const at::Tensor& tensor, int peer, uint32_t tag) = 0;
  virtual std::unique_ptr<Transfer> post_recv(const at::Tensor& tensor, int peer, uint32_t tag) = 0;
  // Collective helpers for bookkeeping (loss reports, trace gathering), not for the pipeline itself.
  virtual void all_reduce_sum(const at::Tensor& tensor, std::chrono::milliseconds timeout) = 0;
  virtual void barrier(std::chrono::milliseconds timeout) = 0;
};

// Rendezvous through the store rank 0 serves on env.master_addr:master_port and no other address
// (rendezvous_store.h), then a ProcessGroupGloo over TCP. Throws TransportError naming the address and what was waited
// for.
std::unique_ptr<Transport> connect_gloo(const RankEnv& env, std::chrono::milliseconds timeout);

// A view of `world` as the group of `ranks` (global ranks, in group order): rank() is the position
// in `ranks`, peers are group positions. Collectives still span the whole world (they serve loss
// reports and barriers, which every rank of the job takes part in). Used by data parallelism: each
// pipeline replica talks to its own stages through a view. `world` must outlive the view.
std::unique_ptr<Transport> make_group_view(Transport& world, std::vector<int> ranks);

// In-process transport: `world_size` endpoints that exchange tensors through shared queues, one per
// thread. For tests of the executor without processes or sockets.
std::vector<std::unique_ptr<Transport>> make_local_transports(int world_size);

// The in-process transport of a job that is this one rank (the first of make_local_transports(1)), as
// transport_registry.h connects it. Throws TransportError for a job of more ranks: they are processes.
std::unique_ptr<Transport> connect_local(const RankEnv& env, std::chrono::milliseconds timeout);

}  // namespace flexpipe::runtime
