// The simulation-checked planner: partition plans that a simulation of the schedule confirms fit.
#include "flexpipe/partition/checked_planner.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/ir/lowering.h"

namespace flexpipe {

CheckedPlanner::CheckedPlanner(CostGraph graph, const HardwareProfile& hardware, Schedule schedule,
                               PlannerSettings settings)
    : graph_(std::move(graph)),
      hardware_(&hardware),
      schedule_(std::move(schedule)),
      settings_(std::move(settings)),
      seq_len_(settings_.seq_len > 0 ? settings_.seq_len : graph_.reference.seq_len) {}

PartitionProblem CheckedPlanner::problem(int microbatch_size) const {
  PartitionProblem p = make_partition_problem(graph_, {double(microbatch_size), seq_len_}, schedule_,
                                              settings_.memory_limit, settings_.host_bandwidth_per_time_unit);
  p.solver = settings_.solver;
  p.should_stop = settings_.should_stop;
  return p;
}

std::function<void(const PartitionProgress&)> CheckedPlanner::progress_saying(const std::string& context) const {
  if (!settings_.progress) return {};
  return [this, context](const PartitionProgress& progress) {
    std::string text = fmt::format("{}: {}, step {}", context, progress.phase, progress.step);
    if (progress.period < kInfinity) text += fmt::format(", period {:.4g} {}", progress.period, graph_.time_unit);
    settings_.progress(fmt::format("{}, {} stage evaluations", text, progress.evaluations));
  };
}

// The partitioner's memory model is checked by simulating the plan (with its R / OFFLOAD / RELOAD
// actions); a device the simulation finds over the limit gets its stages' budgets lowered by the
// excess and the plan is made again, a few rounds at most. With max_batch, when the model's largest
// micro-batch size fails that check, the largest size below it that passes is searched for
// (largest_passing_below: passing is not monotone in the size).
CheckedPlan CheckedPlanner::plan(PartitionMethod method) const {
  const auto start = std::chrono::steady_clock::now();
  int b = settings_.microbatch_size;
  int largest = -1;
  if (settings_.max_batch) {
    largest = max_microbatch_size(
        [&](int size) {
          PartitionProblem p = problem(size);
          p.progress =
              progress_saying(fmt::format("{}, largest micro-batch: trying {}", partition_method_name(method), size));
          return p;
        },
        method, settings_.max_batch_limit);
    b = std::max(1, largest);
  }
  CheckedPlan out = attempt(method, b);
  if (settings_.max_batch && largest > 1 && !out.passes()) {
    // The model's largest fails the simulation check: search below it on the check itself.
    CheckedPlan best = out;  // the largest size that passed so far
    int best_size = 0;
    const int passes = largest_passing_below(b, [&](int size) {
      CheckedPlan trial = attempt(method, size);
      if (!trial.passes()) return false;
      if (size > best_size) best_size = size, best = std::move(trial);
      return true;
    });
    if (passes > 0) {
      b = passes;
      out = std::move(best);
    }
  }
  if (settings_.max_batch) out.max_microbatch_size = out.passes() ? b : 0;
  out.stopped = settings_.should_stop && settings_.should_stop();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  summarize(out);
  return out;
}

template <class Candidate>
CheckedPlan CheckedPlanner::attempt(PartitionMethod method, int microbatch_size, const std::string& label,
                                    Candidate candidate) const {
  CheckedPlan out;
  out.method = method;
  out.microbatch_size = microbatch_size;
  PartitionProblem p = problem(microbatch_size);
  const std::vector<int> sharing = chunks_sharing_device(schedule_);
  constexpr int kRounds = 6;
  for (int round = 0; round < kRounds; ++round) {
    const std::string context = fmt::format("{}, micro-batch {}, round {}", label, microbatch_size, round + 1);
    p.progress = progress_saying(context);
    out.result = candidate(p);
    out.plan = make_plan(out, p);
    out.simulated_ok = false;
    if (!out.result.fits) break;
    if (settings_.progress) settings_.progress(context + ": simulation check");
    AggregationOptions aggregation;
    aggregation.device_link = {0, link_bandwidth_per_ms(*hardware_, Interconnect::NvLink)};
    aggregation.host_link = {0, settings_.host_bandwidth_per_time_unit};
    aggregation.memory_capacity = {settings_.memory_limit};
    const AppliedPlan applied = apply_partition_plan(out.plan, graph_, schedule_, aggregation, "partition");
    out.simulated = simulate(lower(applied.schedule), applied.costs, {.record_timeline = false});
    out.simulated_ok = true;
    out.rounds = round + 1;
    if (out.simulated.fits || (method != PartitionMethod::Dawn && method != PartitionMethod::VPipe)) break;
    for (int s = 0; s < schedule_.num_stages(); ++s) {
      const double excess = out.simulated.devices[schedule_.stage_device[s]].peak_memory - settings_.memory_limit;
      const int chunk = schedule_.chunk_of_stage(s);
      if (excess > 0) p.budget[chunk] = std::min(p.budget[chunk], p.budget[chunk] - excess / sharing[chunk]);
    }
  }
  return out;
}

// Dawn's plan is the fastest in simulation of three candidates that pass the simulation check: the
// binary search's cuts; the compute-balanced cuts with per-operator decisions; and those cuts with
// whole-layer decisions (vPipe's). The search optimizes the partitioner's model; the simulation,
// whose transfers queue on the host link and whose warm-up and cool-down the model leaves out, has
// the last word on fit and time.
CheckedPlan CheckedPlanner::attempt(PartitionMethod method, int microbatch_size) const {
  CheckedPlan out = attempt(method, microbatch_size, partition_method_name(method),
                            [&](const PartitionProblem& p) { return partition_model(p, method); });
  if (method != PartitionMethod::Dawn) return out;
  auto better = [](const CheckedPlan& a, const CheckedPlan& b) {
    return a.passes() && (!b.passes() || a.simulated.makespan < b.simulated.makespan);
  };
  CheckedPlan balanced =
      attempt(method, microbatch_size, "dawn (compute-balanced cuts)", [](const PartitionProblem& p) {
        PartitionResult r = evaluate_partition(p, partition_model(p, PartitionMethod::PipeDream).starts(), true);
        r.method = PartitionMethod::Dawn;
        return r;
      });
  if (better(balanced, out)) out = std::move(balanced);
  CheckedPlan layered = attempt(method, microbatch_size, "dawn (whole-layer decisions)", [](const PartitionProblem& p) {
    PartitionResult r = partition_model(p, PartitionMethod::VPipe);
    r.method = PartitionMethod::Dawn;
    return r;
  });
  if (better(layered, out)) out = std::move(layered);
  return out;
}

PartitionPlan CheckedPlanner::make_plan(const CheckedPlan& out, const PartitionProblem& p) const {
  PartitionPlan plan;
  plan.model = settings_.model;
  plan.graph = graph_.name;
  plan.graph_operators = static_cast<int>(graph_.nodes.size());
  plan.hardware = hardware_->name;
  plan.schedule = settings_.schedule;
  plan.devices = schedule_.num_devices;
  plan.microbatches = schedule_.num_microbatches;
  plan.chunks = settings_.chunks;
  plan.shape = {double(out.microbatch_size), seq_len_};
  plan.memory_limit = settings_.memory_limit;
  plan.host_bandwidth = settings_.host_bandwidth;
  plan.method = partition_method_name(out.method);
  for (size_t s = 0; s < out.result.stages.size(); ++s) {
    const StageResult& r = out.result.stages[s];
    PlannedStage stage;
    stage.operators = r.end - r.begin;
    for (int v = r.begin; v < r.end; ++v) {
      const MemoryDecision d = r.memory.decisions[v - r.begin];
      if (d == MemoryDecision::Recompute) stage.recompute.push_back(graph_.nodes[v].name);
      if (d == MemoryDecision::Offload) stage.offload.push_back(graph_.nodes[v].name);
    }
    stage.offload_checkpoints = r.memory.offload_checkpoints && !stage.recompute.empty();
    stage.report = {{"first", graph_.nodes[r.begin].name},
                    {"last", graph_.nodes[r.end - 1].name},
                    {"in_flight", p.in_flight[s]},
                    {"budget", p.budget[s]},
                    {"compute_time", r.compute_time},
                    {"recompute_time", r.memory.recompute_time},
                    {"offload_time", r.memory.offload_time},
                    {"time", r.time},
                    {"memory", r.memory.memory},
                    {"static_memory", r.memory.static_memory},
                    {"activation_memory", r.memory.activation_memory},
                    {"offload_bytes", r.memory.offload_bytes},
                    {"checkpoint_bytes", r.memory.checkpoint_bytes},
                    {"held_input_bytes", r.memory.input_bytes},
                    {"fits", r.memory.fits},
                    {"exact", r.memory.exact}};
    plan.stages.push_back(std::move(stage));
  }
  return plan;
}

void CheckedPlanner::summarize(CheckedPlan& out) const {
  nlohmann::json& s = out.plan.summary;
  s["fits"] = out.passes();
  s["rounds"] = out.rounds;
  if (out.max_microbatch_size >= 0) s["max_microbatch_size"] = out.max_microbatch_size;
  if (out.simulated_ok) {
    s["bottleneck"] = out.result.bottleneck;
    s["step_time"] = out.simulated.makespan;
    nlohmann::json peaks = nlohmann::json::array();
    for (const DeviceReport& d : out.simulated.devices) peaks.push_back(d.peak_memory);
    s["peak_memory"] = peaks;
  }
  if (!out.result.fits) s["shortfall"] = out.result.shortfall;
  s["time_unit"] = graph_.time_unit;
  s["partition_seconds"] = out.seconds;
  if (out.stopped) s["time_budget_reached"] = true;
}

}  // namespace flexpipe
