// The space of a per-stage cost table (SearchProblem::stage_costs): its entries are the stages, so
// its structures are the placements with as many stages, every memory row the table's own costs.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "anytime_search.h"
#include "flexpipe/support/error.h"

namespace flexpipe::search {

// The table as the search measures it: the problem's memory limit, when finite, on every device.
CostTable AnytimeSearch::table_costs() const {
  CostTable costs = problem_.stage_costs->costs;
  if (problem_.memory_limit < kInfinity) costs.memory_capacity = {problem_.memory_limit};
  return costs;
}

void AnytimeSearch::prepare_table_structures() {
  phase("cost table");
  const StageCostProblem& table = *problem_.stage_costs;
  const int p = problem_.devices, stages = static_cast<int>(table.costs.stages.size());
  check_cost_table(table_costs(), stages, p, table.name);
  if (static_cast<int>(table.recompute.size()) != stages)
    throw Error(fmt::format("search: {}: says whether {} stages may recompute, for {} stages", table.name,
                            table.recompute.size(), stages));
  std::vector<std::pair<PlacementKind, int>> placements;
  if (stages % p == 0 && placement_searched(PlacementKind::Loop, stages / p))
    placements.push_back({PlacementKind::Loop, stages / p});
  if (stages == 2 * p && placement_searched(PlacementKind::V, 2)) placements.push_back({PlacementKind::V, 2});
  if (stages == p && placement_searched(PlacementKind::Bidirectional, 1))
    placements.push_back({PlacementKind::Bidirectional, 1});
  for (const BatchSplit& batch : problem_.batches)
    for (const auto& [placement, chunks] : placements)
      if (placement != PlacementKind::Bidirectional || batch.microbatches > 1)
        structures_.push_back(table_structure(batch, placement, chunks));
  if (structures_.empty())
    throw Error(fmt::format(
        "search: {} has {} stages, and no placement searched on {} devices has as many (a table of {} stages "
        "allows the loop with one stage per device and the bidirectional pair, {} the V and the loop with two "
        "stages per device, v x {} the loop with v)",
        table.name, stages, p, p, 2 * p, p));
}

Structure AnytimeSearch::table_structure(const BatchSplit& batch, PlacementKind placement, int chunks) const {
  const StageCostProblem& table = *problem_.stage_costs;
  const int stages = static_cast<int>(table.costs.stages.size());
  Structure s;
  s.batch = batch;
  s.placement = placement;
  s.chunks = chunks;
  s.partition_name = kTablePartition;
  s.skeleton = skeleton_of(batch, placement, stages);
  s.partition = Partition{stages, {}};
  s.base = table_costs();
  // Every row holds the table's costs: the memory actions placed on the schedule decide what a
  // stage holds (a recomputing stage's F keeps checkpoint_bytes, R rebuilds), as the simulator counts.
  s.rows.resize(stages);
  s.recomputes.assign(stages, {});
  s.offloads.assign(stages, {});
  s.plan_offloads_checkpoints.assign(stages, 0);
  const bool choices = problem_.memory_choices;
  const bool offload = choices && problem_.offload && table.offload && s.base.host_link.bandwidth > 0;
  s.has_row[kKeep] = true;
  for (int k = 0; k < stages; ++k) {
    s.rows[k].fill(table.costs.stages[k]);
    s.recomputes[k][kRecompute] = choices && problem_.recompute && table.recompute[k];
    s.offloads[k][kOffload] = offload;
    s.has_row[kRecompute] = s.has_row[kRecompute] || s.recomputes[k][kRecompute];
  }
  s.has_row[kOffload] = offload;
  return s;
}

}  // namespace flexpipe::search
