// flexpipe partition: memory-aware stage boundaries at operator granularity (docs/partitioner.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/partition/partitioner.h"
#include "flexpipe/partition/plan.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "flexpipe/support/files.h"
#include "flexpipe/views/memory_bars.h"
#include "flexpipe/workflow/partition_request.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

struct PartitionOptions {
  PartitionRequest request;
  bool compare = false;
  std::string output;
  std::string svg;
  bool json = false;
  bool quiet = false;
  bool memory_from_hardware = false;  // no --memory-limit: the hardware profile's memory
};

// The limit as the header line says it, and where it came from when not from --memory-limit.
std::string limit_text(const PartitionOptions& o) {
  const std::string limit = format_bytes(o.request.memory_limit.value, byte_units_of(o.request.memory_limit));
  return o.memory_from_hardware
             ? fmt::format("limit {} per device (the memory of {}: no --memory-limit)", limit, o.request.model.hardware)
             : fmt::format("limit {} per device", limit);
}

// Sizes print in the units the limit was written in: GiB for 80GiB, GB for 80e9.
ByteUnits bytes_of(const PartitionOptions& o) { return byte_units_of(o.request.memory_limit); }

// Progress lines on stderr for the long phases: what the planner is doing, at most one a second,
// so that a partition done within a second prints none (-q: none at all).
class ProgressLines {
 public:
  using Clock = std::chrono::steady_clock;
  ProgressLines(Clock::time_point start, bool quiet) : start_(start), last_(start), quiet_(quiet) {}
  void say(const std::string& text) {
    now_ = text;
    tick();
  }
  void tick() {
    if (quiet_ || now_.empty() || Clock::now() - last_ < std::chrono::seconds(1)) return;
    print_progress_line(start_, now_);
    last_ = Clock::now();
  }

 private:
  Clock::time_point start_, last_;
  bool quiet_;
  std::string now_;
};

void print_plan(const CheckedPlan& out, const CheckedPlanner& planner, const PartitionOptions& o) {
  const CostGraph& graph = planner.graph();
  const Schedule& schedule = planner.schedule();
  const std::string unit = graph.time_unit;
  fmt::print("{} on {} devices ({}), {} with m={}, micro-batch {}, sequence {}, {}\n", graph.name, schedule.num_devices,
             out.plan.hardware, schedule.name, schedule.num_microbatches, out.microbatch_size, planner.seq_len(),
             limit_text(o));
  if (out.max_microbatch_size >= 0) fmt::print("largest micro-batch that fits: {}\n", out.max_microbatch_size);
  if (!out.result.fits) {
    fmt::print("{}\n", does_not_fit(out, planner, o.request));
    return;
  }
  fmt::print("method {}: bottleneck {:.4g} {} per micro-batch, simulated step {:.4g} {} ({} in {:.3f} s{})\n",
             partition_method_name(out.method), out.result.bottleneck, unit, out.simulated.makespan, unit,
             out.simulated.fits ? "fits" : "DOES NOT FIT in simulation", out.seconds,
             out.stopped ? "; time budget reached: the best plan found by then" : "");
  fmt::print("{:<5} {:<44} {:>5} {:>4} {:>10} {:>10} {:>10} {:>10} {:>11} {:>5} {:>8}\n", "stage", "operators", "ops",
             "k", "compute", "+recomp", "+offload", "time", "memory", "R", "O");
  for (size_t s = 0; s < out.result.stages.size(); ++s) {
    const StageResult& r = out.result.stages[s];
    const PlannedStage& p = out.plan.stages[s];
    fmt::print("{:<5} {:<44} {:>5} {:>4} {:>10.4g} {:>10.4g} {:>10.4g} {:>10.4g} {:>11} {:>5} {:>8}\n", s,
               graph.nodes[r.begin].name + " .. " + graph.nodes[r.end - 1].name, r.end - r.begin,
               p.report["in_flight"].get<int>(), r.compute_time, r.memory.recompute_time, r.memory.offload_time, r.time,
               format_bytes(r.memory.memory, bytes_of(o)), p.recompute.size(),
               fmt::format("{}{}", p.offload.size(), p.offload_checkpoints ? "+ckpt" : ""));
  }
  fmt::print(
      "ops: operators; k: micro-batches held at once; compute: F + B per micro-batch, in {}; +recomp, +offload: what "
      "recompute and offload add to it; time: the sum\n"
      "memory: the stage's peak; R: operators recomputed; O: operators offloaded (+ckpt: the recompute checkpoints "
      "too)\n",
      unit);
  std::string peaks;
  for (const DeviceReport& d : out.simulated.devices)
    peaks += (peaks.empty() ? "" : ", ") + format_bytes(d.peak_memory, bytes_of(o));
  fmt::print("simulated peak memory per device: {}\n", peaks);
}

// A partition's per-stage memory, each bar labelled with its total.
MemoryBarPanel memory_bar_panel(std::string title, const PartitionResult& result) {
  MemoryBarPanel panel{std::move(title), {}};
  for (const StageResult& r : result.stages)
    panel.stages.push_back({r.memory.static_memory, r.memory.memory, r.end - r.begin, format_bytes(r.memory.memory)});
  return panel;
}

void run(PartitionOptions o, int& exit_code) {
  // The budget counts from here: reading a large model is part of the wait.
  const auto started = std::chrono::steady_clock::now();
  o.memory_from_hardware = o.request.memory_limit.value <= 0;
  if (o.memory_from_hardware) o.request.memory_limit = hardware_memory(o.request.model.hardware);
  ProgressLines lines(started, o.quiet);
  const CheckedPlanner planner =
      partition_planner(o.request, started,
                        {[&lines](const std::string& text) { lines.say(text); }, [&lines] { lines.tick(); }});
  if (o.compare) {
    std::vector<CheckedPlan> outcomes;
    for (PartitionMethod m : {PartitionMethod::Uniform, PartitionMethod::Params, PartitionMethod::PipeDream,
                              PartitionMethod::VPipe, PartitionMethod::Dawn})
      outcomes.push_back(planner.plan(m));
    if (o.json) {
      nlohmann::json j = nlohmann::json::array();
      for (const CheckedPlan& out : outcomes) {
        nlohmann::json entry = nlohmann::json::parse(partition_plan_to_json(out.plan));
        j.push_back(std::move(entry));
      }
      fmt::print("{}\n", nlohmann::json{{"methods", j}}.dump(2));
      return;
    }
    const std::string unit = planner.graph().time_unit;
    fmt::print("{} on {} devices, {}, {}\n", planner.graph().name, planner.schedule().num_devices,
               planner.schedule().name, limit_text(o));
    fmt::print("{:<10} {:>8} {:>8} {:>14} {:>14} {:>12}\n", "method", "max b", "b", "bottleneck", "step", "peak");
    for (const CheckedPlan& out : outcomes) {
      double peak = 0;
      for (const DeviceReport& d : out.simulated.devices) peak = std::max(peak, d.peak_memory);
      fmt::print("{:<10} {:>8} {:>8} {:>14} {:>14} {:>12}\n", partition_method_name(out.method),
                 out.max_microbatch_size >= 0 ? std::to_string(out.max_microbatch_size) : "-", out.microbatch_size,
                 out.result.fits ? fmt::format("{:.4g} {}", out.result.bottleneck, unit) : "does not fit",
                 out.simulated_ok ? fmt::format("{:.4g} {}", out.simulated.makespan, unit) : "-",
                 out.simulated_ok ? format_bytes(peak, bytes_of(o)) : "-");
    }
    fmt::print(
        "max b: the largest micro-batch that fits (with --max-batch); b: the micro-batch planned; bottleneck: the "
        "slowest stage's time per micro-batch; step: the simulated step; peak: the fullest device's memory\n");
    if (std::any_of(outcomes.begin(), outcomes.end(), [](const CheckedPlan& out) { return out.stopped; }))
      fmt::print("time budget reached: each method's plan is the best it found by then\n");
    return;
  }
  const CheckedPlan out = planner.plan(parse_partition_method(o.request.method));
  if (!o.svg.empty()) {
    const PartitionProblem problem = planner.problem(out.microbatch_size);
    // Before: PipeDream's compute-balanced split with everything kept.
    const MemoryBarPanel before = memory_bar_panel("compute-balanced split, everything kept",
                                                   partition_model(problem, PartitionMethod::PipeDream));
    const MemoryBarPanel after = memory_bar_panel(std::string(partition_method_name(out.method)) + " plan", out.result);
    write_text_file(o.svg, render_memory_bars(before, after, problem.budget));
  }
  if (!o.output.empty()) {
    if (!out.result.fits) throw Error(does_not_fit(out, planner, o.request) + "; no plan written");
    write_text_file(o.output, partition_plan_to_json(out.plan));
  }
  if (o.json)
    fmt::print("{}", partition_plan_to_json(out.plan));
  else
    print_plan(out, planner, o);
  if (!o.json && !o.output.empty()) fmt::print("wrote {}\n", o.output);
  if (!out.result.fits) exit_code = kExitProblemsFound;
}

}  // namespace

void add_partition_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand(
      "partition", "Memory-aware stage boundaries at operator granularity, with per-operator recompute and offload");
  auto o = std::make_shared<PartitionOptions>();
  o->request.schedule.spec = "1f1b";
  command->add_option("--model", o->request.model.model, "Zoo name or cost-graph file (.json)")->required();
  add_model_shape_options(command, o->request.model);
  command->add_option("--schedule", o->request.schedule.spec, "Built-in schedule or file whose in-flight counts apply")
      ->capture_default_str();
  command->add_option("-p,--devices", o->request.schedule.devices, "Devices: the schedule program's parameter p [4]")
      ->check(whole_number_at_least(1));
  command
      ->add_option("-m,--microbatches", o->request.schedule.microbatches,
                   "Micro-batches per step: the schedule program's parameter m [2p for built-ins]")
      ->check(whole_number_at_least(1));
  command
      ->add_option("-v,--chunks", o->request.schedule.chunks,
                   "Stages per device: the schedule program's parameter v, where it has one [its default]")
      ->check(whole_number_at_least(1));
  command->add_option("-D,--define", o->request.schedule.defines,
                      "Set any parameter of the schedule's program, built-in or .fps: -D name=value (repeatable)");
  add_quantity_option(command, "--memory-limit", o->request.memory_limit, QuantityKind::Size, QuantityRange::Positive,
                      kBytesExamples, "Memory per device: 80GiB, 85.9GB or bytes [the --hardware profile's memory]");
  add_quantity_option(command, "--host-bandwidth", o->request.host_bandwidth, QuantityKind::Bandwidth,
                      QuantityRange::NonNegativeOrInfinite, kBytesPerSecondExamples,
                      "Host link: 64GB/s or bytes per second; 0: no offloading, inf: no limit [the hardware's PCIe]");
  command->add_option("--method", o->request.method, "dawn, uniform, params, pipedream, vpipe or exhaustive")
      ->capture_default_str()
      ->check(CLI::IsMember({"dawn", "uniform", "params", "pipedream", "vpipe", "exhaustive"}));
  command->add_option("--solver", o->request.solver, "Memory decisions: exact, greedy or auto (exact on small stages)")
      ->capture_default_str()
      ->check(CLI::IsMember({"exact", "greedy", "auto"}));
  command->add_flag("--max-batch", o->request.max_batch,
                    "Find the largest micro-batch size that fits, then plan for it");
  command->add_option("--max-batch-limit", o->request.max_batch_limit, "Largest micro-batch size --max-batch tries")
      ->capture_default_str()
      ->check(whole_number_at_least(1));
  command->add_flag("--compare", o->compare, "Run every method (not exhaustive) and print one line each");
  command->add_option("-o,--output", o->output, "Write the plan (JSON, docs/partition-plan.md)");
  command->add_flag("--json", o->json, "Print the plan as JSON");
  add_quantity_option(command, "--time-budget", o->request.time_budget, QuantityKind::Time, QuantityRange::Positive,
                      kSecondsExamples,
                      "How long the partitioner may take (30s, 2min or seconds), reading the model included; then it "
                      "answers with the best plan found by then [no limit]");
  command->add_flag("-q,--quiet", o->quiet, "No progress lines on stderr (printed at most once a second)");
  command->add_option("--svg", o->svg, "Write per-stage memory, before (compute-balanced, all kept) and after, as SVG");
  command->callback([o, &exit_code] { run(*o, exit_code); });
}

}  // namespace flexpipe::cli
