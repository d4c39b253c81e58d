// flexpipe search: the automated scheduler (docs/search.md). Prints the best schedule found next to
// every built-in under the same costs and memory limit, and writes it as a program of the language.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/interop/partition_plan_json.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/lang/writer.h"
#include "flexpipe/partition/plan.h"
#include "flexpipe/search/search.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "flexpipe/support/files.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

struct SearchCommand {
  ModelOptions model;
  int devices = 0;
  int microbatches = 0;
  int global_batch = 0;
  double memory_limit = 0;  // 0: the hardware's memory
  double time_budget = 10;
  int threads = 0;  // 0: every core
  int max_chunks = 4;
  double link_bandwidth = -1;        // bytes per second; -1: the hardware's NVLink
  double link_latency = 0;           // in the graph's time unit
  double host_bandwidth = -1;        // bytes per second; -1: the hardware's PCIe
  int devices_per_node = 0;          // 0: one node
  double inter_node_bandwidth = -1;  // bytes per second; -1: the hardware's InfiniBand
  double inter_node_latency = 0;     // in the graph's time unit
  bool no_local_search = false;
  bool no_exact = false;
  bool no_partitioner = false;
  bool quiet = false;
  std::vector<std::string> plans;
  std::string output;
  std::string costs_output;
  bool json = false;
};

// The ways to cut --global-batch samples into micro-batches of whole samples: every divisor, from the
// fewest micro-batches that still feed every device to 8 per device.
std::vector<BatchSplit> batch_splits(const SearchCommand& o) {
  if (o.global_batch <= 0) {
    if (o.microbatches < 1) throw Error("search: give -m (micro-batches per step) or --global-batch");
    return {{o.microbatches, o.model.microbatch_size}};
  }
  if (o.microbatches > 0) {
    if (o.global_batch % o.microbatches != 0)
      throw Error(fmt::format("search: --global-batch {} does not split into {} micro-batches", o.global_batch,
                              o.microbatches));
    return {{o.microbatches, double(o.global_batch / o.microbatches)}};
  }
  std::vector<BatchSplit> out;
  for (int m = 1; m <= o.global_batch; ++m)
    if (o.global_batch % m == 0 && m >= std::min(o.devices, o.global_batch) && m <= 8 * o.devices)
      out.push_back({m, double(o.global_batch / m)});
  return out;
}

nlohmann::json report_json(const ScheduleCandidateReport& r) {
  nlohmann::json j = {{"name", r.name}};
  if (!r.skipped.empty()) {
    j["skipped"] = r.skipped;
    return j;
  }
  j["family"] = r.family;
  j["makespan"] = r.makespan;
  j["bubble_ratio"] = r.bubble_ratio;
  j["lower_bound"] = r.lower_bound;
  j["gap_to_lower_bound"] = r.lower_bound > 0 ? r.makespan / r.lower_bound - 1 : 0.0;
  j["peak_memory"] = r.peak_memory;
  j["fits"] = r.fits;
  j["microbatches"] = r.batch.microbatches;
  j["microbatch_size"] = r.batch.microbatch_size;
  std::vector<int> sizes(r.partition.num_stages, 0);
  for (int k : r.partition.stage_of_node) ++sizes[k];
  j["operators_per_stage"] = sizes;
  return j;
}

double largest(const std::vector<double>& values) {
  double out = 0;
  for (double v : values) out = std::max(out, v);
  return out;
}

// One bound for every row: the search's, which no schedule of the space (nor a built-in) can beat.
void print_table(const SearchResult& r, const std::string& unit) {
  fmt::print("{:<22} {:>12} {:>8} {:>10} {:>6} {:>12}\n", "schedule", "makespan", "bubble", "peak", "fits",
             "above bound");
  auto line = [&](const std::string& name, const ScheduleCandidateReport& c) {
    if (!c.skipped.empty()) {
      fmt::print("{:<22} skipped: {}\n", name, c.skipped);
      return;
    }
    fmt::print("{:<22} {:>9.4g} {:<2} {:>7.1f}% {:>10} {:>6} {:>+11.1f}%\n", name, c.makespan, unit,
               100 * c.bubble_ratio, gigabytes(largest(c.peak_memory)), c.fits ? "yes" : "NO",
               r.lower_bound > 0 ? 100 * (c.makespan / r.lower_bound - 1) : 0.0);
  };
  line("best: " + r.best.name, r.best);
  for (const ScheduleCandidateReport& b : r.builtins) line(b.name, b);
}

void run(const SearchCommand& o, int& exit_code) {
  // The budget counts from here: reading and preparing a large model is part of the wait.
  const auto started = std::chrono::steady_clock::now();
  if (o.devices < 1) throw Error("search: -p (devices) must be at least 1");
  if (o.time_budget <= 0) throw Error(fmt::format("search: --time-budget {}: must be positive", o.time_budget));
  const HardwareProfile& hardware = find_hardware(o.model.hardware);
  SearchProblem problem;
  std::function<void(const std::string&)> reading;
  if (!o.quiet) reading = [started](const std::string& text) { print_progress_line(started, text); };
  problem.graph = load_model_graph(o.model, reading);
  problem.devices = o.devices;
  problem.batches = batch_splits(o);
  if (problem.batches.empty())
    throw Error(fmt::format("search: --global-batch {} has no split into {}..{} micro-batches", o.global_batch,
                            o.devices, 8 * o.devices));
  problem.seq_len = o.model.seq_len;
  problem.memory_limit = o.memory_limit > 0 ? o.memory_limit : hardware.memory_bytes;
  problem.max_chunks = o.max_chunks;
  const double link = o.link_bandwidth >= 0 ? o.link_bandwidth : hardware.nvlink_bandwidth;
  problem.aggregation.device_link = {o.link_latency, link > 0 ? per_time_unit(problem.graph, link) : kInfinity};
  const double host = o.host_bandwidth >= 0 ? o.host_bandwidth : hardware.pcie_bandwidth;
  problem.aggregation.host_link = {0, host > 0 ? per_time_unit(problem.graph, host) : 0.0};
  if (o.devices_per_node > 0) {
    problem.aggregation.devices_per_node = o.devices_per_node;
    const double inter = o.inter_node_bandwidth >= 0 ? o.inter_node_bandwidth : hardware.infiniband_bandwidth;
    problem.aggregation.inter_node_link = {o.inter_node_latency,
                                           inter > 0 ? per_time_unit(problem.graph, inter) : kInfinity};
  } else if (o.inter_node_bandwidth >= 0 || o.inter_node_latency > 0) {
    throw Error("--inter-node-bandwidth and --inter-node-latency need --devices-per-node (which devices share a node)");
  }

  for (const std::string& path : o.plans) {
    const PartitionPlan plan = load_partition_plan(path);
    GivenPartition given;
    given.name = std::filesystem::path(path).filename().string();
    given.partition = plan_partition(plan, problem.graph, path);
    given.decisions = plan_decisions(plan, problem.graph, path);
    given.offload_checkpoints = chunks_that_offload_checkpoints(plan);
    given.microbatch_size = plan.shape.microbatch_size;
    const bool size_searched = std::any_of(problem.batches.begin(), problem.batches.end(), [&](const BatchSplit& b) {
      return b.microbatch_size == given.microbatch_size;
    });
    if (!size_searched)
      throw Error(fmt::format("{}: the plan is for micro-batches of {} samples, which the search does not try", path,
                              given.microbatch_size));
    const int stages = given.partition.num_stages;
    if (stages % o.devices != 0 || stages / o.devices > std::max(o.max_chunks, 2))
      throw Error(fmt::format("{}: the plan has {} stages, no placement of {} devices searched has as many", path,
                              stages, o.devices));
    problem.partitions.push_back(std::move(given));
  }

  SearchOptions options;
  options.time_budget = o.time_budget;
  options.start = started;
  options.threads = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  options.local_search = !o.no_local_search;
  options.exact = !o.no_exact;
  options.partitioner = !o.no_partitioner;
  const std::string unit = problem.graph.time_unit;
  if (!o.quiet)
    options.progress = [&unit](const SearchProgress& p) {
      fmt::print(stderr, "[{:6.2f} s] {:<26} {:>7} simulated {:>7} skipped  best {:.6g} {}\n", p.seconds, p.phase,
                 p.evaluated, p.pruned, p.best_makespan, unit);
    };
  const SearchResult result = search_schedules(problem, options);

  if (!o.output.empty() && !result.best.schedule.device_actions.empty()) {
    const ScheduleCandidateReport& b = result.best;
    std::string header = fmt::format(
        "# flexpipe search: {} on {} devices, {} micro-batches of {}, limit {} per device\n# {}\n# simulated makespan "
        "{:.6g} {}, lower bound {:.6g}, peak {}{}\n",
        problem.graph.name, o.devices, b.batch.microbatches, b.batch.microbatch_size, gigabytes(problem.memory_limit),
        b.family, b.makespan, unit, b.lower_bound, gigabytes(largest(b.peak_memory)), b.fits ? "" : " (DOES NOT FIT)");
    write_text_file(o.output, header + write_program(b.schedule));
  }
  if (!o.costs_output.empty() && !result.best.costs.stages.empty())
    write_text_file(o.costs_output, cost_table_to_json(result.best.costs));

  if (o.json) {
    nlohmann::json j = {{"model", problem.graph.name},
                        {"devices", o.devices},
                        {"memory_limit", problem.memory_limit},
                        {"time_unit", unit},
                        {"found", result.found},
                        {"lower_bound", result.lower_bound},
                        {"best", report_json(result.best)}};
    nlohmann::json builtins = nlohmann::json::array();
    for (const ScheduleCandidateReport& b : result.builtins) builtins.push_back(report_json(b));
    j["builtins"] = builtins;
    nlohmann::json history = nlohmann::json::array();
    for (const auto& [seconds, makespan] : result.history)
      history.push_back({{"seconds", seconds}, {"makespan", makespan}});
    j["search"] = {{"evaluated", result.evaluated}, {"pruned", result.pruned},
                   {"stalled", result.stalled},     {"seconds", result.seconds},
                   {"exhausted", result.exhausted}, {"proven_optimal", result.proven_optimal},
                   {"threads", options.threads},    {"history", history}};
    if (!result.found) j["infeasible"] = result.infeasible;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print(
        "{} on {} devices, limit {} per device: simulated {} schedules in {:.2f} s{}, and skipped {} whose lower "
        "bound showed they could not beat the best\n",
        problem.graph.name, o.devices, gigabytes(problem.memory_limit), result.evaluated, result.seconds,
        result.exhausted ? "" : " (stopped by the time budget: the best so far)", result.pruned);
    if (result.found) fmt::print("best: {}\n", result.best.family);
    if (result.proven_optimal)
      fmt::print(
          "proved: no per-device order of the placements and partitions searched, with everything kept, is "
          "faster (branch and bound)\n");
    fmt::print(
        "lower bound {:.4g} {}: no order of the placements and partitions searched, nor any built-in, takes less;\n"
        "\"above bound\" below is how much longer than that each schedule takes\n",
        result.lower_bound, unit);
    print_table(result, unit);
    std::string peaks;
    for (double peak : result.best.peak_memory) peaks += (peaks.empty() ? "" : ", ") + gigabytes(peak);
    fmt::print("best's peak memory per device: {}\n", peaks);
    if (!o.output.empty() && result.found) fmt::print("wrote {}\n", o.output);
  }
  if (!result.found) {
    fmt::print(stderr, "search: {}\n", result.infeasible);
    exit_code = kExitProblemsFound;
  }
}

}  // namespace

void add_search_command(CLI::App& app, int& exit_code) {
  auto* command = app.add_subcommand(
      "search",
      "Find the fastest schedule that fits: placements, partitions, split backward, in-flight limits, "
      "W placement, recompute / offload and micro-batch counts, each simulated; compared with every built-in");
  auto o = std::make_shared<SearchCommand>();
  command->add_option("--model", o->model.model, "Zoo name or cost-graph file (.json)")->required();
  add_model_shape_options(command, o->model);
  command->add_option("-p,--devices", o->devices, "Devices (pipeline ranks)")
      ->required()
      ->check(whole_number_at_least(1));
  command->add_option("-m,--microbatches", o->microbatches, "Micro-batches per step")->check(whole_number_at_least(1));
  command
      ->add_option("--global-batch", o->global_batch,
                   "Samples per step: the search also chooses how many micro-batches (of whole samples) to cut it into")
      ->check(whole_number_at_least(1));
  command->add_option("--memory-limit", o->memory_limit, "Memory per device in bytes [the hardware's]")
      ->check(positive_number());
  command->add_option("--time-budget", o->time_budget, "Seconds the search may take")->capture_default_str();
  command->add_option("--threads", o->threads, "Search threads [every core]")->check(whole_number_at_least(0));
  command->add_option("--max-chunks", o->max_chunks, "Largest number of stages per device in loop placements")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  command
      ->add_option("--link-bandwidth", o->link_bandwidth,
                   "Between devices, bytes per second; inf: no limit [the hardware's NVLink]")
      ->check(positive_rate());
  command->add_option("--link-latency", o->link_latency, "Per transfer between devices, in the graph's time unit")
      ->check(non_negative_number());
  command
      ->add_option("--host-bandwidth", o->host_bandwidth,
                   "Host link for offloading, bytes per second; 0: no offloading, inf: no limit [PCIe]")
      ->check(non_negative_rate());
  command
      ->add_option("--devices-per-node", o->devices_per_node,
                   "Two-level topology: devices d and e share a node when d / N = e / N; --link-* is then the "
                   "link within a node [all devices on one node]")
      ->check(whole_number_at_least(1));
  command
      ->add_option("--inter-node-bandwidth", o->inter_node_bandwidth,
                   "Between devices of different nodes, bytes per second; inf: no limit [the hardware's InfiniBand]")
      ->check(positive_rate());
  command
      ->add_option("--inter-node-latency", o->inter_node_latency,
                   "Per transfer between devices of different nodes, in the graph's time unit [0]")
      ->check(non_negative_number());
  command
      ->add_option("--plan", o->plans,
                   "A partition plan (flexpipe partition -o) to search with as well, on every placement with its stage "
                   "count (repeatable)");
  command->add_flag("--no-local-search", o->no_local_search, "Only the enumerated candidates, no hill climbing");
  command->add_flag(
      "--no-partitioner", o->no_partitioner,
      "No DawnPiper partitions (flexpipe partition on each placement; slow on large models under tight memory)");
  command->add_flag("--no-exact", o->no_exact,
                    "No branch and bound on small instances (p <= 4, m <= 8, <= 8 stages or <= 16 when m <= p)");
  command->add_flag("-q,--quiet", o->quiet, "No progress lines on stderr");
  command->add_option("-o,--output", o->output, "Write the best schedule as a program (.fps)");
  command->add_option("--costs-output", o->costs_output, "Write the best schedule's cost table (JSON) for `simulate`");
  command->add_flag("--json", o->json, "Print JSON: best, builtins, search statistics");
  command->callback([o, &exit_code] { run(*o, exit_code); });
}

}  // namespace flexpipe::cli
