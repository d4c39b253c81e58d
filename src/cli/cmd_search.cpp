// flexpipe search: the automated scheduler (docs/search.md). Prints the best schedule found next to
// every built-in under the same costs and memory limit, and writes it as a program of the language.
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "flexpipe/interop/cost_table_json.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "flexpipe/support/files.h"
#include "flexpipe/workflow/search_report.h"
#include "flexpipe/workflow/search_request.h"
#include "number_checks.h"
#include "options.h"

namespace flexpipe::cli {

namespace {

struct SearchCommand {
  SearchRequest request;
  bool quiet = false;
  std::string output;
  std::string costs_output;
  bool json = false;
};

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

// One bound for every row: the search's, which no schedule of the space (nor a built-in) can beat.
void print_table(const SearchRun& run) {
  const SearchResult& r = run.result;
  fmt::print("{:<22} {:>12} {:>8} {:>10} {:>6} {:>12}\n", "schedule", "makespan", "bubble", "peak", "fits",
             "above bound");
  auto line = [&](const std::string& name, const ScheduleCandidateReport& c) {
    if (!c.skipped.empty()) {
      fmt::print("{:<22} skipped: {}\n", name, c.skipped);
      return;
    }
    fmt::print("{:<22} {:>9.4g} {:<2} {:>7.1f}% {:>10} {:>6} {:>+11.1f}%\n", name, c.makespan,
               run.problem.graph.time_unit, 100 * c.bubble_ratio, memory_text(run.problem, largest(c.peak_memory)),
               c.fits ? "yes" : "NO", r.lower_bound > 0 ? 100 * (c.makespan / r.lower_bound - 1) : 0.0);
  };
  line("best: " + r.best.name, r.best);
  for (const ScheduleCandidateReport& b : r.builtins) line(b.name, b);
}

void print_summary(const SearchRun& run, const std::string& output) {
  const SearchProblem& problem = run.problem;
  const SearchResult& result = run.result;
  const std::string& unit = problem.graph.time_unit;
  fmt::print(
      "{} on {} devices, limit {} per device: simulated {} schedules in {:.2f} s{}, and skipped {} whose lower "
      "bound showed they could not beat the best\n",
      problem.graph.name, problem.devices, limit_text(problem), result.evaluated, result.seconds,
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
  print_table(run);
  std::string peaks;
  for (double peak : result.best.peak_memory) peaks += (peaks.empty() ? "" : ", ") + memory_text(problem, peak);
  fmt::print("best's peak memory per device: {}\n", peaks);
  if (!output.empty() && result.found) fmt::print("wrote {}\n", output);
}

void run(const SearchCommand& o, int& exit_code) {
  SearchHooks hooks;  // the budget counts from here: reading and preparing a large model is part of the wait
  if (!o.quiet) {
    hooks.reading = [start = hooks.start](const std::string& text) { print_progress_line(start, text); };
    hooks.progress = [](const SearchProgress& p, const std::string& unit) {
      fmt::print(stderr, "[{:6.2f} s] {:<26} {:>7} simulated {:>7} skipped  best {:.6g} {}\n", p.seconds, p.phase,
                 p.evaluated, p.pruned, p.best_makespan, unit);
    };
  }
  const SearchRun run = run_search(o.request, hooks);
  const SearchResult& result = run.result;
  if (!o.output.empty() && !result.best.schedule.device_actions.empty())
    write_text_file(o.output, searched_program_text(run));
  if (!o.costs_output.empty() && !result.best.costs.stages.empty())
    write_text_file(o.costs_output, cost_table_to_json(result.best.costs));
  if (o.json)
    fmt::print("{}\n", search_report_json(run).dump(2));
  else
    print_summary(run, o.output);
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
  auto* model =
      command->add_option("--model", o->request.model.model, "Zoo name or cost-graph file (.json); or --costs");
  add_model_shape_options(command, o->request.model);
  auto* costs = command->add_option(
      "--costs", o->request.costs,
      "Instead of --model: a per-stage cost table (docs/cost-table.md) as Zero Bubble or Megatron profiles give. "
      "p stages: loop and bidirectional placements; 2p: V and interleaved. Stages recompute where the table gives "
      "\"recompute\", offload where it gives \"host_link\"");
  costs->excludes(model);
  command->add_option("-p,--devices", o->request.devices, "Devices (pipeline ranks)")
      ->required()
      ->check(whole_number_at_least(1));
  command->add_option("-m,--microbatches", o->request.microbatches, "Micro-batches per step")
      ->check(whole_number_at_least(1));
  command
      ->add_option("--global-batch", o->request.global_batch,
                   "Samples per step: the search also chooses how many micro-batches (of whole samples) to cut it into")
      ->check(whole_number_at_least(1));
  add_quantity_option(command, "--memory-limit", o->request.memory_limit, QuantityKind::Size, QuantityRange::Positive,
                      kBytesExamples,
                      "Memory per device: 80GiB, 85.9GB or bytes; with --costs, a bare number in the table's memory "
                      "unit [the hardware's; the table's memory_capacity]");
  add_quantity_option(command, "--time-budget", o->request.time_budget, QuantityKind::Time, QuantityRange::Positive,
                      kSecondsExamples, "How long the search may take: 30s, 2min or seconds [10s]");
  command->add_option("--threads", o->request.threads, "Search threads [every core]")->check(whole_number_at_least(0));
  command->add_option("--max-chunks", o->request.max_chunks, "Largest number of stages per device in loop placements")
      ->capture_default_str()
      ->check(whole_number_between(1, 16));
  add_quantity_option(
      command, "--link-bandwidth", o->request.link_bandwidth, QuantityKind::Bandwidth,
      QuantityRange::PositiveOrInfinite, kBytesPerSecondExamples,
      "Between devices: 900GB/s or bytes per second; inf: no limit [a profiled graph's measured link, else "
      "the hardware's NVLink]");
  add_quantity_option(command, "--link-latency", o->request.link_latency, QuantityKind::Time,
                      QuantityRange::NonNegative, kGraphTimeExamples,
                      "Per transfer between devices: 5us, or a bare number in the model's time unit [0]");
  add_quantity_option(command, "--host-bandwidth", o->request.host_bandwidth, QuantityKind::Bandwidth,
                      QuantityRange::NonNegativeOrInfinite, kBytesPerSecondExamples,
                      "Host link for offloading: 64GB/s or bytes per second; 0: no offloading, inf: no limit [PCIe]");
  command
      ->add_option("--devices-per-node", o->request.devices_per_node,
                   "Two-level topology: devices d and e share a node when d / N = e / N; --link-* is then the "
                   "link within a node [all devices on one node]")
      ->check(whole_number_at_least(1));
  add_quantity_option(command, "--inter-node-bandwidth", o->request.inter_node_bandwidth, QuantityKind::Bandwidth,
                      QuantityRange::PositiveOrInfinite, kBytesPerSecondExamples,
                      "Between devices of different nodes: 25GB/s or bytes per second; inf: no limit [the hardware's "
                      "InfiniBand]");
  add_quantity_option(command, "--inter-node-latency", o->request.inter_node_latency, QuantityKind::Time,
                      QuantityRange::NonNegative, kGraphTimeExamples,
                      "Per transfer between devices of different nodes: 5us, or a bare number in the model's time "
                      "unit [0]");
  command
      ->add_option("--plan", o->request.plans,
                   "A partition plan (flexpipe partition -o) to search with as well, on every placement with its stage "
                   "count (repeatable)");
  command
      ->add_option("--families", o->request.families,
                   "Only these placement families, comma-separated: loop (one stage per device), interleaved (loop "
                   "with several), v, bidirectional; a built-in may be the answer only in one of them [all]")
      ->type_name("LIST");
  command->add_flag("--no-recompute", o->request.no_recompute,
                    "Never recompute: keep or offload every stage's activations");
  command->add_flag("--no-offload", o->request.no_offload, "Never offload activations to the host");
  command->add_flag("--no-bidirectional", o->request.no_bidirectional,
                    "No pair of pipelines in opposite directions (DualPipe's placement)");
  command->add_flag("--no-local-search", o->request.no_local_search,
                    "Only the enumerated candidates, no hill climbing");
  command->add_flag(
      "--no-partitioner", o->request.no_partitioner,
      "No DawnPiper partitions (flexpipe partition on each placement; slow on large models under tight memory)");
  command->add_flag("--no-exact", o->request.no_exact,
                    "No branch and bound on small instances (p <= 4, m <= 8, <= 8 stages or <= 16 when m <= p)");
  command->add_flag("-q,--quiet", o->quiet, "No progress lines on stderr");
  command->add_option("-o,--output", o->output, "Write the best schedule as a program (.fps)");
  command->add_option("--costs-output", o->costs_output, "Write the best schedule's cost table (JSON) for `simulate`");
  command->add_flag("--json", o->json, "Print JSON: best, builtins, search statistics");
  command->callback([o, command, &exit_code] {
    // Checked here rather than declared to CLI11, whose help would list them all after --costs.
    if (!o->request.costs.empty())
      for (const auto& [option, why] : kModelOnly)
        if (command->count(std::string(option)) > 0)
          throw Error(fmt::format("search: {} does not apply to a cost table (--costs): {}", option, why));
    run(*o, exit_code);
  });
}

}  // namespace flexpipe::cli
