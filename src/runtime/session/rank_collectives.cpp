// Gathering every rank's numbers and traces through the transport's all-reduce, and naming a peer's failure.
#include "session/rank_collectives.h"

#include <algorithm>
#include <iterator>

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace flexpipe::runtime {

std::vector<double> gather(Transport& transport, double x, std::chrono::milliseconds timeout) {
  at::Tensor slots = at::zeros({transport.world_size()}, at::TensorOptions().dtype(at::kDouble));
  slots[transport.rank()] = x;
  transport.all_reduce_sum(slots, timeout);
  std::vector<double> values(transport.world_size());
  for (int r = 0; r < transport.world_size(); ++r) values[r] = slots[r].item<double>();
  return values;
}

std::vector<std::vector<MeasuredAction>> gather_all_traces(Transport& transport, const std::vector<ActionRecord>& mine,
                                                           std::chrono::milliseconds timeout) {
  const std::vector<double> counts = gather(transport, double(mine.size()), timeout);
  const int64_t longest = static_cast<int64_t>(*std::max_element(counts.begin(), counts.end()));
  at::Tensor all =
      at::zeros({transport.world_size(), std::max<int64_t>(longest, 1), 4}, at::TensorOptions().dtype(at::kLong));
  auto own = all[transport.rank()];
  for (size_t i = 0; i < mine.size(); ++i) {
    own[i][0] = mine[i].index;
    own[i][1] = mine[i].start_ns;
    own[i][2] = mine[i].end_ns;
    own[i][3] = mine[i].wait_ns;
  }
  transport.all_reduce_sum(all, timeout);
  std::vector<std::vector<MeasuredAction>> devices(transport.world_size());
  const auto table = all.accessor<int64_t, 3>();
  for (int r = 0; r < transport.world_size(); ++r)
    for (int64_t i = 0; i < static_cast<int64_t>(counts[r]); ++i)
      devices[r].push_back(
          {static_cast<int32_t>(table[r][i][0]), table[r][i][1] / 1e6, table[r][i][2] / 1e6, table[r][i][3] / 1e6});
  return devices;
}

std::vector<MeasuredStep> split_by_replica(std::vector<std::vector<MeasuredAction>> all, int devices) {
  std::vector<MeasuredStep> replicas(all.size() / devices);
  for (size_t r = 0; r < replicas.size(); ++r)
    replicas[r].assign(std::make_move_iterator(all.begin() + r * devices),
                       std::make_move_iterator(all.begin() + (r + 1) * devices));
  return replicas;
}

void collective(const Transport& world, int step, std::string_view what, const std::function<void()>& body) {
  try {
    body();
  } catch (const TransportError& e) {
    throw PeerFailure(fmt::format("rank {}: step {}: {}: {}", world.rank(), step, what, e.what()));
  }
}

}  // namespace flexpipe::runtime
