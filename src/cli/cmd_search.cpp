// flexpipe search: the automated scheduler (docs/search.md). Prints the best schedule found next to
// every built-in under the same costs and memory limit, and writes it as a program of the language.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <string_view>
#include <thread>
#include <utility>

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
  std::string costs;  // a per-stage cost table instead of --model
  int devices = 0;
  int microbatches = 0;
  int global_batch = 0;
  Quantity memory_limit;    // 0: the hardware's memory (a cost table's: its memory_capacity)
  double time_budget = 10;  // seconds
  int threads = 0;          // 0: every core
  int max_chunks = 4;
  double link_bandwidth = -1;        // bytes per second; -1: the hardware's NVLink
  Quantity link_latency;             // a bare number: in the graph's time unit
  double host_bandwidth = -1;        // bytes per second; -1: the hardware's PCIe
  int devices_per_node = 0;          // 0: one node
  double inter_node_bandwidth = -1;  // bytes per second; -1: the hardware's InfiniBand
  Quantity inter_node_latency;       // a bare number: in the graph's time unit
  bool no_local_search = false;
  bool no_exact = false;
  bool no_partitioner = false;
  std::string families;  // empty: every family
  bool no_recompute = false;
  bool no_offload = false;
  bool no_bidirectional = false;
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
    if (o.microbatches < 1)
      throw Error(o.costs.empty() ? "search: give -m (micro-batches per step) or --global-batch"
                                  : "search: give -m (micro-batches per step)");
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

// What shapes, times or partitions a model, and a cost table has already done.
constexpr std::pair<std::string_view, std::string_view> kModelOnly[] = {
    {"--hardware", "its times are measured"},
    {"--microbatch-size", "its costs are per micro-batch as measured"},
    {"--seq-len", "its costs are per micro-batch as measured"},
    {"--flash-attention", "its costs are per micro-batch as measured"},
    {"--global-batch", "its costs are per micro-batch as measured; give -m"},
    {"--max-chunks", "its stage count decides the placements"},
    {"--link-bandwidth", "it gives its links (\"link\", \"links\")"},
    {"--link-latency", "it gives its links (\"link\", \"links\")"},
    {"--host-bandwidth", "it gives its host link (\"host_link\")"},
    {"--devices-per-node", "it gives its topology (\"devices_per_node\", \"inter_node_link\")"},
    {"--inter-node-bandwidth", "it gives its topology (\"devices_per_node\", \"inter_node_link\")"},
    {"--inter-node-latency", "it gives its topology (\"devices_per_node\", \"inter_node_link\")"},
    {"--plan", "its stages are the partition"},
    {"--no-partitioner", "its stages are the partition"},
};

// The placement families of --families, and what each switches on.
constexpr std::string_view kFamilies[] = {"loop", "interleaved", "v", "bidirectional"};

void choose_families(const SearchCommand& o, SearchProblem& problem) {
  if (!o.families.empty()) {
    std::vector<std::string> chosen;
    for (size_t from = 0; from <= o.families.size();) {
      size_t comma = std::min(o.families.find(',', from), o.families.size());
      std::string name = o.families.substr(from, comma - from);
      name.erase(0, name.find_first_not_of(' '));
      name.erase(name.find_last_not_of(' ') + 1);
      if (std::find(std::begin(kFamilies), std::end(kFamilies), name) == std::end(kFamilies))
        throw Error(
            fmt::format("--families: '{}' is not a family; choose from loop, interleaved, v, bidirectional", name));
      chosen.push_back(name);
      from = comma + 1;
    }
    auto has = [&](std::string_view family) { return std::find(chosen.begin(), chosen.end(), family) != chosen.end(); };
    problem.single_stage_loop = has("loop");
    if (!has("interleaved")) problem.max_chunks = 1;
    problem.v_shape = has("v");
    problem.bidirectional = has("bidirectional");
  }
  if (o.no_bidirectional) problem.bidirectional = false;
  problem.recompute = !o.no_recompute;
  problem.offload = !o.no_offload;
}

// A per-stage cost table: recompute and offload only where it gives their costs.
StageCostProblem load_stage_costs(const std::string& path) {
  StatedCosts stated;
  StageCostProblem table;
  table.costs = load_cost_table(path, 0, &stated);
  table.name = std::filesystem::path(path).filename().string();
  table.recompute = stated.recompute;
  table.offload = stated.host_link;
  return table;
}

// Sizes as the input gives them: a model's in bytes (printed in GB), a cost table's in its own unit,
// bare when it names none.
std::string memory_text(const SearchProblem& problem, double amount, ByteUnits bytes) {
  if (!problem.stage_costs) return format_bytes(amount, bytes);
  if (!std::isfinite(amount)) return "unlimited";
  const std::string& unit = problem.stage_costs->costs.memory_unit;
  return unit == "unit" ? fmt::format("{:.4g}", amount) : fmt::format("{:.4g} {}", amount, unit);
}

// The limit the search measured against, for the report's first line.
std::string limit_text(const SearchProblem& problem, ByteUnits bytes) {
  if (!problem.stage_costs || problem.memory_limit < kInfinity)
    return memory_text(problem, problem.memory_limit, bytes);
  const std::vector<double>& capacity = problem.stage_costs->costs.memory_capacity;
  if (capacity.empty()) return "no memory limit";
  std::string text;
  for (double c : capacity) text += (text.empty() ? "" : ", ") + memory_text(problem, c, bytes);
  return text;
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
  if (r.partition.stage_of_node.empty()) return j;  // a cost table's stages: no operators
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
void print_table(const SearchResult& r, const std::string& unit, const SearchProblem& problem, ByteUnits bytes) {
  fmt::print("{:<22} {:>12} {:>8} {:>10} {:>6} {:>12}\n", "schedule", "makespan", "bubble", "peak", "fits",
             "above bound");
  auto line = [&](const std::string& name, const ScheduleCandidateReport& c) {
    if (!c.skipped.empty()) {
      fmt::print("{:<22} skipped: {}\n", name, c.skipped);
      return;
    }
    fmt::print("{:<22} {:>9.4g} {:<2} {:>7.1f}% {:>10} {:>6} {:>+11.1f}%\n", name, c.makespan, unit,
               100 * c.bubble_ratio, memory_text(problem, largest(c.peak_memory), bytes), c.fits ? "yes" : "NO",
               r.lower_bound > 0 ? 100 * (c.makespan / r.lower_bound - 1) : 0.0);
  };
  line("best: " + r.best.name, r.best);
  for (const ScheduleCandidateReport& b : r.builtins) line(b.name, b);
}

void run(const SearchCommand& o, int& exit_code) {
  // The budget counts from here: reading and preparing a large model is part of the wait.
  const auto started = std::chrono::steady_clock::now();
  if (o.devices < 1) throw Error("search: -p (devices) must be at least 1");
  if (o.model.model.empty() == o.costs.empty()) throw Error("search: give --model (a model) or --costs (a cost table)");
  const HardwareProfile& hardware = find_hardware(o.model.hardware);
  SearchProblem problem;
  std::function<void(const std::string&)> reading;
  if (!o.quiet) reading = [started](const std::string& text) { print_progress_line(started, text); };
  if (!o.costs.empty()) {
    problem.stage_costs = load_stage_costs(o.costs);
    problem.graph.name = problem.stage_costs->name;
    // A table that names no unit ("unit", the default) prints its times bare.
    const std::string& time_unit = problem.stage_costs->costs.time_unit;
    problem.graph.time_unit = time_unit == "unit" ? "" : time_unit;
  } else {
    problem.graph = load_model_graph(o.model, reading);
  }
  choose_families(o, problem);
  problem.devices = o.devices;
  problem.batches = batch_splits(o);
  if (problem.batches.empty())
    throw Error(fmt::format("search: --global-batch {} has no split into {}..{} micro-batches", o.global_batch,
                            o.devices, 8 * o.devices));
  problem.seq_len = o.model.seq_len;
  // A cost table's own capacity unless --memory-limit replaces it.
  problem.memory_limit = o.memory_limit.value <= 0 ? (o.costs.empty() ? hardware.memory_bytes : kInfinity)
                         : o.costs.empty()
                             ? o.memory_limit.value
                             : in_memory_unit(o.memory_limit, problem.stage_costs->costs.memory_unit, "--memory-limit");
  const ByteUnits bytes = byte_units_of(o.memory_limit);
  problem.byte_units = bytes;
  if (problem.max_chunks > 1) problem.max_chunks = o.max_chunks;
  if (o.costs.empty()) {  // a cost table gives its own links
    const double link = o.link_bandwidth >= 0 ? o.link_bandwidth : hardware.nvlink_bandwidth;
    problem.aggregation.device_link = {in_time_unit(o.link_latency, problem.graph.time_unit, "--link-latency"),
                                       link > 0 ? per_time_unit(problem.graph, link) : kInfinity};
    // A graph that measured its transport brings that link, unless the command line gives one.
    if (problem.graph.link && o.link_bandwidth < 0 && o.link_latency.value == 0)
      problem.aggregation.device_link = *problem.graph.link;
    const double host = o.host_bandwidth >= 0 ? o.host_bandwidth : hardware.pcie_bandwidth;
    problem.aggregation.host_link = {0, host > 0 ? per_time_unit(problem.graph, host) : 0.0};
    if (o.devices_per_node > 0) {
      problem.aggregation.devices_per_node = o.devices_per_node;
      const double inter = o.inter_node_bandwidth >= 0 ? o.inter_node_bandwidth : hardware.infiniband_bandwidth;
      problem.aggregation.inter_node_link = {in_time_unit(o.inter_node_latency, problem.graph.time_unit,
                                                          "--inter-node-latency"),
                                             inter > 0 ? per_time_unit(problem.graph, inter) : kInfinity};
    } else if (o.inter_node_bandwidth >= 0 || o.inter_node_latency.value > 0) {
      throw Error(
          "--inter-node-bandwidth and --inter-node-latency need --devices-per-node (which devices share a node)");
    }
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
    const std::string batch =
        problem.stage_costs ? fmt::format("{} micro-batches", b.batch.microbatches)
                            : fmt::format("{} micro-batches of {}", b.batch.microbatches, b.batch.microbatch_size);
    std::string header = fmt::format(
        "# flexpipe search: {} on {} devices, {}, limit {} per device\n# {}\n# simulated makespan "
        "{:.6g} {}, lower bound {:.6g}, peak {}{}\n",
        problem.graph.name, o.devices, batch, limit_text(problem, bytes), b.family, b.makespan, unit, b.lower_bound,
        memory_text(problem, largest(b.peak_memory), bytes), b.fits ? "" : " (DOES NOT FIT)");
    write_text_file(o.output, header + write_program(b.schedule));
  }
  if (!o.costs_output.empty() && !result.best.costs.stages.empty())
    write_text_file(o.costs_output, cost_table_to_json(result.best.costs));

  if (o.json) {
    nlohmann::json j = {{problem.stage_costs ? "costs" : "model", problem.graph.name},
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
    nlohmann::json phases = nlohmann::json::array();
    for (const SearchPhase& p : result.phases)
      phases.push_back({{"name", p.name}, {"seconds", p.seconds}, {"evaluated", p.evaluated}, {"pruned", p.pruned}});
    j["search"] = {{"evaluated", result.evaluated},
                   {"pruned", result.pruned},
                   {"stalled", result.stalled},
                   {"seconds", result.seconds},
                   {"exhausted", result.exhausted},
                   {"proven_optimal", result.proven_optimal},
                   {"threads", options.threads},
                   {"history", history},
                   {"phases", phases}};
    if (!result.found) j["infeasible"] = result.infeasible;
    fmt::print("{}\n", j.dump(2));
  } else {
    fmt::print(
        "{} on {} devices, limit {} per device: simulated {} schedules in {:.2f} s{}, and skipped {} whose lower "
        "bound showed they could not beat the best\n",
        problem.graph.name, o.devices, limit_text(problem, bytes), result.evaluated, result.seconds,
        result.exhausted ? "" : " (stopped by the time budget: the best so far)", result.pruned);
    if (result.found) fmt::print("best: {}\n", result.best.family);
    if (result.proven_optimal)
      fmt::print(
          "proved: no per-device order of the placements and partitions searched, with everything kept, is "
          "faster (branch and bound)\n");
    fmt::print(
        "lower bound {:.4g}{}: no order of the placements and partitions searched, nor any built-in, takes less;\n"
        "\"above bound\" below is how much longer than that each schedule takes\n",
        result.lower_bound, unit.empty() ? "" : " " + unit);
    print_table(result, unit, problem, bytes);
    std::string peaks;
    for (double peak : result.best.peak_memory)
      peaks += (peaks.empty() ? "" : ", ") + memory_text(problem, peak, bytes);
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
  auto* model = command->add_option("--model", o->model.model, "Zoo name or cost-graph file (.json); or --costs");
  add_model_shape_options(command, o->model);
  auto* costs = command->add_option(
      "--costs", o->costs,
      "Instead of --model: a per-stage cost table (docs/cost-table.md) as Zero Bubble or Megatron profiles give. "
      "p stages: loop and bidirectional placements; 2p: V and interleaved. Stages recompute where the table gives "
      "\"recompute\", offload where it gives \"host_link\"");
  costs->excludes(model);
  command->add_option("-p,--devices", o->devices, "Devices (pipeline ranks)")
      ->required()
      ->check(whole_number_at_least(1));
  command->add_option("-m,--microbatches", o->microbatches, "Micro-batches per step")->check(whole_number_at_least(1));
  command
      ->add_option("--global-batch", o->global_batch,
                   "Samples per step: the search also chooses how many micro-batches (of whole samples) to cut it into")
      ->check(whole_number_at_least(1));
  add_quantity_option(command, "--memory-limit", o->memory_limit, QuantityKind::Size, QuantityRange::Positive,
                      kBytesExamples,
                      "Memory per device: 80GiB, 85.9GB or bytes; with --costs, a bare number in the table's memory "
                      "unit [the hardware's; the table's memory_capacity]");
  add_quantity_option(command, "--time-budget", o->time_budget, QuantityKind::Time, QuantityRange::Positive,
                      kSecondsExamples, "How long the search may take: 30s, 2min or seconds [10s]");
  command->add_option("--threads", o->threads, "Search threads [every core]")->check(whole_number_at_least(0));
  command->add_option("--max-chunks", o->max_chunks, "Largest number of stages per device in loop placements")
      ->capture_default_str()
      ->check(whole_number_between(1, 16));
  add_quantity_option(
      command, "--link-bandwidth", o->link_bandwidth, QuantityKind::Bandwidth, QuantityRange::PositiveOrInfinite,
      kBytesPerSecondExamples,
      "Between devices: 900GB/s or bytes per second; inf: no limit [a profiled graph's measured link, else "
      "the hardware's NVLink]");
  add_quantity_option(command, "--link-latency", o->link_latency, QuantityKind::Time, QuantityRange::NonNegative,
                      kGraphTimeExamples,
                      "Per transfer between devices: 5us, or a bare number in the model's time unit [0]");
  add_quantity_option(command, "--host-bandwidth", o->host_bandwidth, QuantityKind::Bandwidth,
                      QuantityRange::NonNegativeOrInfinite, kBytesPerSecondExamples,
                      "Host link for offloading: 64GB/s or bytes per second; 0: no offloading, inf: no limit [PCIe]");
  command
      ->add_option("--devices-per-node", o->devices_per_node,
                   "Two-level topology: devices d and e share a node when d / N = e / N; --link-* is then the "
                   "link within a node [all devices on one node]")
      ->check(whole_number_at_least(1));
  add_quantity_option(command, "--inter-node-bandwidth", o->inter_node_bandwidth, QuantityKind::Bandwidth,
                      QuantityRange::PositiveOrInfinite, kBytesPerSecondExamples,
                      "Between devices of different nodes: 25GB/s or bytes per second; inf: no limit [the hardware's "
                      "InfiniBand]");
  add_quantity_option(command, "--inter-node-latency", o->inter_node_latency, QuantityKind::Time,
                      QuantityRange::NonNegative, kGraphTimeExamples,
                      "Per transfer between devices of different nodes: 5us, or a bare number in the model's time "
                      "unit [0]");
  command
      ->add_option("--plan", o->plans,
                   "A partition plan (flexpipe partition -o) to search with as well, on every placement with its stage "
                   "count (repeatable)");
  command
      ->add_option("--families", o->families,
                   "Only these placement families, comma-separated: loop (one stage per device), interleaved (loop "
                   "with several), v, bidirectional; a built-in may be the answer only in one of them [all]")
      ->type_name("LIST");
  command->add_flag("--no-recompute", o->no_recompute, "Never recompute: keep or offload every stage's activations");
  command->add_flag("--no-offload", o->no_offload, "Never offload activations to the host");
  command->add_flag("--no-bidirectional", o->no_bidirectional,
                    "No pair of pipelines in opposite directions (DualPipe's placement)");
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
  command->callback([o, command, &exit_code] {
    // Checked here rather than declared to CLI11, whose help would list them all after --costs.
    if (!o->costs.empty())
      for (const auto& [option, why] : kModelOnly)
        if (command->count(std::string(option)) > 0)
          throw Error(fmt::format("search: {} does not apply to a cost table (--costs): {}", option, why));
    run(*o, exit_code);
  });
}

}  // namespace flexpipe::cli
