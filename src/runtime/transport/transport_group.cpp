// A view of the world transport as a group of its ranks (one data-parallel pipeline replica).
#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "transport/transport.h"

namespace flexpipe::runtime {

namespace {

class GroupView final : public Transport {
 public:
  GroupView(Transport& world, std::vector<int> ranks) : world_(world), ranks_(std::move(ranks)) {
    for (size_t i = 0; i < ranks_.size(); ++i)
      if (ranks_[i] == world.rank()) rank_ = static_cast<int>(i);
    if (rank_ < 0) throw Error(fmt::format("rank {} is not in the group it was given", world.rank()));
  }
  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(ranks_.size()); }
  std::string backend() const override { return world_.backend(); }
  int global_rank(int peer) const override { return global(peer); }
  std::unique_ptr<Transfer> post_send(const at::Tensor& tensor, int peer, uint32_t tag) override {
    return world_.post_send(tensor, global(peer), tag);
  }
  std::unique_ptr<Transfer> post_recv(const at::Tensor& tensor, int peer, uint32_t tag) override {
    return world_.post_recv(tensor, global(peer), tag);
  }
  void all_reduce_sum(const at::Tensor& tensor, std::chrono::milliseconds timeout) override {
    world_.all_reduce_sum(tensor, timeout);
  }
  void barrier(std::chrono::milliseconds timeout) override { world_.barrier(timeout); }

 private:
  int global(int peer) const {
    if (peer < 0 || peer >= static_cast<int>(ranks_.size()))
      throw TransportError(fmt::format("peer {} is outside a group of {}", peer, ranks_.size()));
    return ranks_[peer];
  }
  Transport& world_;
  std::vector<int> ranks_;
  int rank_ = -1;
};

}  // namespace

std::unique_ptr<Transport> make_group_view(Transport& world, std::vector<int> ranks) {
  return std::make_unique<GroupView>(world, std::move(ranks));
}

}  // namespace flexpipe::runtime
