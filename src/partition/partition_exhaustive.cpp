// Every partition of a small graph, each at its own period: the reference the binary partitioner is
// tested against.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "stage_cost.h"

namespace flexpipe::partition {

PartitionResult exhaustive_partition(const PartitionProblem& problem) {
  const int n = problem.ops.size(), stages = problem.num_stages();
  // C(n-1, S-1) partitions, each bisected on its period: a reference for small graphs only.
  if (n > 40 || stages > 6)
    throw Error(
        fmt::format("exhaustive search is for graphs of up to 40 operators and 6 stages (this one: {} and {}); "
                    "use --method dawn",
                    n, stages));
  StageCost cost(problem);
  PartitionResult best;
  best.method = PartitionMethod::Exhaustive;
  std::vector<int> starts(stages + 1, 0);
  starts[stages] = n;
  auto visit = [&](auto&& self, int s) -> void {
    if (s == stages) {
      PartitionResult r = decide_stages(problem, cost, starts, true, PartitionMethod::Exhaustive);
      if (r.fits && (!best.fits || r.bottleneck < best.bottleneck)) best = std::move(r);
      return;
    }
    for (int cut = starts[s - 1] + 1; cut <= n - (stages - s); ++cut) {
      if (!problem.cut_allowed.empty() && !problem.cut_allowed[cut]) continue;
      starts[s] = cut;
      self(self, s + 1);
    }
  };
  if (stages == 1) {
    best = decide_stages(problem, cost, starts, true, PartitionMethod::Exhaustive);
  } else {
    visit(visit, 1);
  }
  best.method = PartitionMethod::Exhaustive;
  return best;
}

}  // namespace flexpipe::partition
