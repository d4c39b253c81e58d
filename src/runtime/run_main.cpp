// The runtime library's entry point: one rank of `flexpipe run`. Connects to the other ranks, trains
// every requested schedule from the same initial weights, optionally checks the result against the
// single-process reference, and has rank 0 print the report and write the measured timeline.
#include <cmath>
#include <cstdio>
#include <map>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "executor.h"
#include "flexpipe/core/error.h"
#include "flexpipe/core/lowering.h"
#include "flexpipe/core/measured_timeline.h"
#include "flexpipe/core/schedule_io.h"
#include "flexpipe/core/simulator.h"
#include "flexpipe/core/views.h"
#include "flexpipe/runtime/entry.h"
#include "reference_model.h"
#include "transport.h"

namespace flexpipe::runtime {

namespace {

using Milliseconds = std::chrono::milliseconds;

// Every rank's value of `x`, in rank order, on every rank.
std::vector<double> gather(Transport& transport, double x, Milliseconds timeout) {
  at::Tensor slots = at::zeros({transport.world_size()}, at::TensorOptions().dtype(at::kDouble));
  slots[transport.rank()] = x;
  transport.all_reduce_sum(slots, timeout);
  std::vector<double> values(transport.world_size());
  for (int r = 0; r < transport.world_size(); ++r) values[r] = slots[r].item<double>();
  return values;
}

// Every rank's trace of the step, on every rank (padded to the longest list).
std::vector<std::vector<MeasuredAction>> gather_trace(Transport& transport, const std::vector<ActionRecord>& mine,
                                                      Milliseconds timeout) {
  const std::vector<double> counts = gather(transport, double(mine.size()), timeout);
  const int64_t longest = static_cast<int64_t>(*std::max_element(counts.begin(), counts.end()));
  at::Tensor all = at::zeros({transport.world_size(), std::max<int64_t>(longest, 1), 4},
                             at::TensorOptions().dtype(at::kLong));
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
      devices[r].push_back({static_cast<int32_t>(table[r][i][0]), table[r][i][1] / 1e6, table[r][i][2] / 1e6,
                            table[r][i][3] / 1e6});
  return devices;
}

struct RunOutcome {
  nlohmann::json json;
  bool verified = true;
};

class RankJob {
 public:
  RankJob(const RunRequest& request, Transport& transport) : request_(request), transport_(transport) {
    timeout_ = Milliseconds(static_cast<int64_t>(request.timeout_seconds * 1000));
    optimizer_.kind = request.training.optimizer;
    optimizer_.learning_rate = request.training.learning_rate;
    optimizer_.weight_decay = request.training.weight_decay;
    check_optimizer(optimizer_);
    if (request.training.dtype != "float32" && request.training.dtype != "float64")
      throw Error(fmt::format("dtype '{}': use float32 or float64", request.training.dtype));
    dtype_ = request.training.dtype == "float64" ? at::kDouble : at::kFloat;
  }

  RunOutcome train(const ScheduledRun& run, const HookRegistry& hooks) {
    const Schedule& schedule = run.schedule;
    const int m = schedule.num_microbatches;
    const ModelPlan plan = make_model_plan(request_.model, run.partition, request_.training.microbatch_size, dtype_,
                                           request_.training.seed);
    ExecutorOptions options;
    options.optimizer = optimizer_;
    options.timeout = timeout_;
    options.fault = request_.fault;
    Executor executor(schedule, plan, transport_, hooks, options);
    RunOutcome outcome;
    nlohmann::json& j = outcome.json;
    j["schedule"] = schedule.name;
    j["ranks"] = transport_.world_size();
    j["microbatches"] = m;
    j["stages"] = schedule.num_stages();
    j["steps"] = nlohmann::json::array();
    StepReport last;
    for (int step = 0; step < request_.training.steps; ++step) {
      last = executor.run_step(step, make_batch(plan, m, step));
      const std::vector<double> seconds = gather(transport_, last.seconds, timeout_);
      const std::vector<double> peak = gather(transport_, double(last.peak_saved_bytes), timeout_);
      const std::vector<double> overhead =
          gather(transport_, last.overhead_ns / 1e3 / std::max<double>(1, double(last.actions)), timeout_);
      j["steps"].push_back({{"loss", last.loss},
                            {"seconds", *std::max_element(seconds.begin(), seconds.end())},
                            {"peak_saved_bytes", peak},
                            {"overhead_us_per_action", overhead}});
    }
    const auto devices = gather_trace(transport_, last.trace, timeout_);
    const Schedule& lowered = executor.lowered();
    const SimResult measured = measured_result(lowered, devices);
    const SimResult predicted =
        simulate(with_measured_custom_durations(lowered, devices), measured_costs(lowered, devices), {false, false});
    j["measured_makespan_ms"] = measured.makespan;
    j["predicted_makespan_ms"] = predicted.makespan;
    j["measured_bubble_ratio"] = measured.bubble_ratio;
    j["predicted_bubble_ratio"] = predicted.bubble_ratio;
    if (transport_.rank() == 0) {
      if (!request_.trace_path.empty())
        write_text_file(output_path(request_.trace_path, schedule.name), render_trace(lowered, measured, "ms"));
      if (!request_.svg_path.empty())
        write_text_file(output_path(request_.svg_path, schedule.name), render_svg(lowered, measured));
    }
    if (request_.verify) outcome.verified = verify(plan, executor, schedule, j);
    return outcome;
  }

 private:
  // With several schedules in one run, each file gets the schedule's name before its extension.
  std::string output_path(const std::string& path, const std::string& schedule) const {
    if (request_.runs.size() == 1) return path;
    const size_t dot = path.find_last_of('.');
    const size_t slash = path.find_last_of('/');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + "." + schedule;
    return path.substr(0, dot) + "." + schedule + path.substr(dot);
  }

  const ReferenceRun& reference(const ModelPlan& plan, int microbatches) {
    auto it = references_.find(microbatches);
    if (it == references_.end())
      it = references_.emplace(microbatches, train_reference(plan, microbatches, request_.training.steps, optimizer_)).first;
    return it->second;
  }

  bool verify(const ModelPlan& plan, Executor& executor, const Schedule& schedule, nlohmann::json& j) {
    const ReferenceRun& ref = reference(plan, schedule.num_microbatches);
    double loss_difference = 0;
    for (int step = 0; step < request_.training.steps; ++step) {
      const double got = j["steps"][step]["loss"].get<double>(), want = ref.losses[step];
      loss_difference = std::max(loss_difference, std::abs(got - want) / std::max(std::abs(want), 1e-300));
    }
    double worst = 0;
    std::string worst_name;
    for (int stage : executor.local_stages())
      for (const auto& [node, params] : executor.stage_parameters(stage))
        for (size_t i = 0; i < params.size(); ++i) {
          const double d = relative_difference(params[i], ref.parameters[node][i]);
          if (d > worst || worst_name.empty()) {
            worst = d;
            worst_name = fmt::format("{}[{}] (stage {})", plan.graph.nodes[node].name, i, stage);
          }
        }
    const std::vector<double> per_rank = gather(transport_, worst, timeout_);
    const double parameter_difference = *std::max_element(per_rank.begin(), per_rank.end());
    const bool passed = loss_difference <= request_.tolerance && parameter_difference <= request_.tolerance;
    if (worst > request_.tolerance)
      fmt::print(stderr, "rank {}: {}: parameter {} differs from the single-process run by {:.3g} (relative)\n",
                 transport_.rank(), schedule.name, worst_name, worst);
    j["verify"] = {{"loss_difference", loss_difference},
                   {"parameter_difference", parameter_difference},
                   {"tolerance", request_.tolerance},
                   {"passed", passed}};
    return passed;
  }

  const RunRequest& request_;
  Transport& transport_;
  Milliseconds timeout_;
  OptimizerConfig optimizer_;
  at::ScalarType dtype_ = at::kFloat;
  std::map<int, ReferenceRun> references_;
};

void print_text(const nlohmann::json& run) {
  fmt::print("{}: {} ranks, {} stages, {} micro-batches\n", run["schedule"].get<std::string>(), run["ranks"].get<int>(),
             run["stages"].get<int>(), run["microbatches"].get<int>());
  int step = 0;
  for (const auto& s : run["steps"])
    fmt::print("  step {}: loss {:.6f}  {:.1f} ms\n", step++, s["loss"].get<double>(), 1e3 * s["seconds"].get<double>());
  fmt::print("  last step: measured {:.2f} ms (bubble {:.1f}%), simulated with the measured action times {:.2f} ms "
             "(bubble {:.1f}%)\n",
             run["measured_makespan_ms"].get<double>(), 100 * run["measured_bubble_ratio"].get<double>(),
             run["predicted_makespan_ms"].get<double>(), 100 * run["predicted_bubble_ratio"].get<double>());
  if (run.contains("verify")) {
    const auto& v = run["verify"];
    fmt::print("  verify: loss {:.3g}, parameters {:.3g} relative to the single-process run (tolerance {:.3g}): {}\n",
               v["loss_difference"].get<double>(), v["parameter_difference"].get<double>(), v["tolerance"].get<double>(),
               v["passed"].get<bool>() ? "exact" : "MISMATCH");
  }
}

int run_rank(const RunRequest& request) {
  HookRegistry hooks;
  for (const auto& [name, spec] : request.hooks) hooks.add(name, builtin_hook(spec));
  std::unique_ptr<Transport> transport;
  std::vector<std::unique_ptr<Transport>> local;
  const Milliseconds timeout(static_cast<int64_t>(request.timeout_seconds * 1000));
  if (request.env.world_size == 1) {
    local = make_local_transports(1);
    transport = std::move(local[0]);
  } else {
    transport = connect_gloo(request.env, timeout);
  }
  RankJob job(request, *transport);
  nlohmann::json runs = nlohmann::json::array();
  bool all_verified = true;
  for (const ScheduledRun& run : request.runs) {
    RunOutcome outcome = job.train(run, hooks);
    all_verified = all_verified && outcome.verified;
    if (transport->rank() == 0) {
      if (!request.json) print_text(outcome.json);
      std::fflush(stdout);
    }
    runs.push_back(std::move(outcome.json));
  }
  if (transport->rank() == 0 && request.json) fmt::print("{}\n", nlohmann::json{{"runs", runs}}.dump(2));
  return all_verified ? 0 : 1;
}

}  // namespace

}  // namespace flexpipe::runtime

extern "C" int flexpipe_runtime_main(const flexpipe::runtime::RunRequest* request) {
  using namespace flexpipe::runtime;
  int code = 0;
  try {
    code = run_rank(*request);
  } catch (const PeerFailure& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    code = 3;
  } catch (const TransportError& e) {
    fmt::print(stderr, "error: rank {}: {}\n", request->env.rank, e.what());
    code = 3;
  } catch (const flexpipe::Error& e) {
    fmt::print(stderr, "error: rank {}: {}\n", request->env.rank, e.what());
    code = 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "internal error: rank {}: {}\n", request->env.rank, e.what());
    code = 3;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // After a failure, c10d's destructors may wait for peers that are gone: leave without them.
  if (code != 0) std::_Exit(code);
  return code;
}
