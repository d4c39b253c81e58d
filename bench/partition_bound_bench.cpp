// How far moving cuts can take the largest micro-batch at all, measured with the simulator alone:
// every layer recomputed whole (what vPipe's greedy ends with at its largest batch), 1F1B on 4
// devices, 80 GiB each. For each model it reports the largest micro-batch with
//  - even layer cuts (the vPipe-like baseline's cuts),
//  - the best layer cuts found by trying every one (embedding and head count as layers),
//  - the best layer cuts with every recomputed micro-batch's checkpoints offloaded after F and
//    reloaded right before R (a per-tensor swap a per-layer swap-or-recompute baseline lacks).
// docs/partitioner.md quotes the table.
//
//   build/partition_bound_bench [MODEL...]
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/ir/memory_actions.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/sim/simulator.h"

using namespace flexpipe;

namespace {

constexpr int kDevices = 4, kMicrobatches = 8, kLargest = 16384;
constexpr double kLimit = 80.0 * 1024 * 1024 * 1024;

class Bound {
 public:
  explicit Bound(const std::string& model)
      : hardware_(find_hardware("H100-80GB")), graph_(build_model_graph(find_model(model), hardware_, {})) {
    const Schedule base = make_builtin("1f1b", {kDevices, kMicrobatches});
    recomputing_ = lower(add_memory_actions(base, std::vector<char>(kDevices, 1), std::vector<char>(kDevices, 0)));
    // The RELOAD right before each R (checkpoint offload's placement), so that only one micro-batch's
    // checkpoints are back at a time.
    const std::vector<char> all(kDevices, 1);
    offloading_ = lower(add_memory_actions(base, all, all, all));
  }

  int layers() const { return static_cast<int>(graph_.layers.size()); }

  bool fits(const std::vector<int>& counts, int b, bool offload) const {
    AggregationOptions o;
    o.shape = {double(b), graph_.reference.seq_len};
    o.decisions.assign(graph_.nodes.size(), MemoryDecision::Recompute);
    o.device_link = {0, link_bandwidth_per_ms(hardware_, Interconnect::NvLink)};
    o.host_link = {0, hardware_.pcie_bandwidth / 1000.0};
    o.memory_capacity = {kLimit};
    CostTable costs = aggregate_stages(graph_, partition_from_layer_counts(graph_, counts), o).table;
    if (offload)
      for (StageCosts& c : costs.stages) c.offload_bytes = c.checkpoint_bytes;
    return simulate(offload ? offloading_ : recomputing_, costs, {.record_timeline = false}).fits;
  }

  int largest(const std::vector<int>& counts, bool offload, int at_least = 0) const {
    int lo = at_least, hi = kLargest;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (fits(counts, mid, offload))
        lo = mid;
      else
        hi = mid - 1;
    }
    return lo;
  }

  // The best cuts over every split of the layers into 4 non-empty ranges.
  std::pair<int, std::vector<int>> best(bool offload) const {
    const int n = layers();
    int best = 0;
    std::vector<int> argmax;
    for (int a = 1; a <= n - 3; ++a)
      for (int b = 1; a + b <= n - 2; ++b)
        for (int c = 1; a + b + c <= n - 1; ++c) {
          const std::vector<int> counts{a, b, c, n - a - b - c};
          if (!fits(counts, best + 1, offload)) continue;
          best = largest(counts, offload, best + 1);
          argmax = counts;
        }
    return {best, argmax};
  }

 private:
  const HardwareProfile& hardware_;
  CostGraph graph_;
  Schedule recomputing_, offloading_;
};

std::string cuts(const std::vector<int>& counts) {
  std::string text;
  for (int c : counts) {
    if (!text.empty()) text += '+';
    text += std::to_string(c);
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models(argv + 1, argv + argc);
  if (models.empty())
    models = {"gpt3-1.3b",  "gpt3-2.7b", "gpt3-6.7b", "llama2-7b", "llama3-8b",
              "bert-large", "t5-large",  "vit-l16",   "vit-h14"};
  fmt::print("| model | even cuts | best cuts | best / even | best cuts, checkpoints offloaded | that / even |\n");
  fmt::print("| --- | --- | --- | --- | --- | --- |\n");
  for (const std::string& model : models) {
    const Bound bound(model);
    // The blocks split evenly, the embedding with the first and the head with the last.
    const int blocks = bound.layers() - 2, quarter = blocks / 4;
    const std::vector<int> even{1 + quarter, quarter, quarter, blocks - 3 * quarter + 1};
    const int base = bound.largest(even, false);
    const auto [kept, kept_cuts] = bound.best(false);
    const auto [offloaded, offloaded_cuts] = bound.best(true);
    auto ratio = [&](int b) { return base > 0 ? fmt::format("{:.2f}x", double(b) / base) : std::string("-"); };
    fmt::print("| {} | {} ({}) | {} ({}) | {} | {} ({}) | {} |\n", model, base, cuts(even), kept, cuts(kept_cuts),
               ratio(kept), offloaded, cuts(offloaded_cuts), ratio(offloaded));
    std::fflush(stdout);
  }
}
