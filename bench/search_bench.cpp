// The automated scheduler's benchmark suite (docs/search.md): zoo models on 4-16 devices, m in
// {p, 2p, 4p}, memory from what 1F1B needs to what every built-in needs (at least the device's whole
// memory), transfers from free to 20%
// of a stage's forward. Prints one markdown row per configuration: the search against Megatron's
// 1F1B and interleaved 1F1B, the best built-in and the lower bound, and when it came within 1% of
// its final answer; then the small instances against the exact optimum (exact_schedule.h), and how
// far the exact optimum lies above the lower bound.
//
//   build/search_bench [--budget SECONDS] [--threads T] [--only N]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/search/exact_schedule.h"
#include "flexpipe/search/search.h"
#include "flexpipe/train/trainable_model.h"

namespace {

using namespace flexpipe;

enum class Memory { Tight, Middle, Relaxed };

struct Config {
  const char* model;
  int p;
  int m;
  Memory memory;
  double comm;  // a transfer's latency as a fraction of the mean stage forward under 1F1B's partition
};

const char* memory_name(Memory m) { return m == Memory::Tight ? "tight" : m == Memory::Middle ? "middle" : "relaxed"; }

const std::vector<Config> kSuite = {
    {"gpt3-1.3b", 4, 4, Memory::Relaxed, 0.0},  {"gpt3-1.3b", 4, 8, Memory::Tight, 0.0},
    {"t5-large", 4, 16, Memory::Relaxed, 0.05}, {"bert-large", 4, 16, Memory::Tight, 0.2},
    {"llama2-7b", 8, 8, Memory::Tight, 0.1},    {"llama2-7b", 8, 16, Memory::Relaxed, 0.0},
    {"llama2-7b", 8, 32, Memory::Middle, 0.2},  {"deepseek-moe-16b", 8, 32, Memory::Tight, 0.1},
    {"vit-h14", 8, 8, Memory::Relaxed, 0.05},   {"t5-large", 8, 8, Memory::Tight, 0.2},
    {"llama3-8b", 8, 32, Memory::Relaxed, 0.2}, {"mixtral-8x7b", 16, 32, Memory::Relaxed, 0.05},
    {"gpt3-13b", 16, 16, Memory::Relaxed, 0.0}, {"gpt3-6.7b", 16, 32, Memory::Middle, 0.0},
    {"gpt3-13b", 16, 64, Memory::Tight, 0.1},
};

SearchProblem problem_for(const Config& c, const HardwareProfile& hardware) {
  SearchProblem problem;
  problem.graph = build_model_graph(find_model(c.model), hardware);
  problem.devices = c.p;
  problem.batches = {{c.m, 1}};
  problem.memory_limit = hardware.memory_bytes;
  problem.aggregation.device_link = {0, link_bandwidth_per_ms(hardware, Interconnect::NvLink)};
  problem.aggregation.host_link = {0, link_bandwidth_per_ms(hardware, Interconnect::Pcie)};
  return problem;
}

const ScheduleCandidateReport* builtin(const SearchResult& r, const std::string& name) {
  for (const ScheduleCandidateReport& b : r.builtins)
    if (b.name == name && b.skipped.empty()) return &b;
  return nullptr;
}

double peak(const ScheduleCandidateReport& r) { return *std::max_element(r.peak_memory.begin(), r.peak_memory.end()); }

// Time at which the best so far first came within 1% of the final answer.
double time_to_one_percent(const SearchResult& r) {
  for (const auto& [seconds, makespan] : r.history)
    if (makespan <= 1.01 * r.best.makespan) return seconds;
  return r.seconds;
}

// The zoo's configurations: the built-ins and the search at each memory level and transfer share,
// and the geometric-mean speedup over Megatron's schedules.
void print_zoo_table(const HardwareProfile& hardware, double budget, int threads, int only) {
  fmt::print(
      "| # | model | p | m | memory | comm | 1F1B | interleaved | best built-in | search | speedup vs Megatron "
      "| vs best built-in | vs space bound | vs own bound | within 1% at | schedules |\n");
  fmt::print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  double log_speedup = 0;
  int counted = 0;
  for (size_t i = 0; i < kSuite.size(); ++i) {
    if (only >= 0 && static_cast<int>(i) != only) continue;
    const Config& c = kSuite[i];
    SearchProblem problem = problem_for(c, hardware);
    SearchOptions probe;
    probe.time_budget = 60;
    probe.local_search = false;
    probe.partitioner = false;
    // The memory levels come from the built-ins at the device's whole memory: tight is 1F1B's peak,
    // middle halfway to ZB-H2's. Transfers: a fixed latency, a fraction of the mean stage forward.
    problem.max_chunks = 1;
    problem.v_shape = false;
    problem.bidirectional = false;
    problem.memory_choices = false;
    const SearchResult reference = search_schedules(problem, probe);
    const ScheduleCandidateReport* one = builtin(reference, "1f1b");
    const ScheduleCandidateReport* h2 = builtin(reference, "zb-h2");
    double forward = 0;
    for (const StageCosts& s : one->costs.stages) forward += s.forward;
    forward /= one->costs.stages.size();
    problem = problem_for(c, hardware);
    problem.aggregation.device_link.latency = c.comm * forward;
    if (c.memory == Memory::Tight) problem.memory_limit = peak(*one) * 1.0001;
    if (c.memory == Memory::Middle) problem.memory_limit = (peak(*one) + (h2 ? peak(*h2) : peak(*one))) / 2;
    if (c.memory == Memory::Relaxed)  // every built-in fits
      for (const ScheduleCandidateReport& b : reference.builtins)
        if (b.skipped.empty()) problem.memory_limit = std::max(problem.memory_limit, peak(b) * 1.0001);
    SearchOptions options;
    options.time_budget = budget;
    options.threads = threads;
    const SearchResult r = search_schedules(problem, options);
    const ScheduleCandidateReport *f = builtin(r, "1f1b"), *interleaved = builtin(r, "interleaved-1f1b");
    double megatron = kInfinity, best_builtin = kInfinity;
    std::string best_name = "-";
    for (const ScheduleCandidateReport* b : {f, interleaved})
      if (b && b->fits) megatron = std::min(megatron, b->makespan);
    for (const ScheduleCandidateReport& b : r.builtins)
      if (b.skipped.empty() && b.fits && b.makespan < best_builtin) best_builtin = b.makespan, best_name = b.name;
    auto cell = [](const ScheduleCandidateReport* b) {
      return !b        ? std::string("-")
             : b->fits ? fmt::format("{:.1f}", b->makespan)
                       : fmt::format("({:.1f})", b->makespan);
    };
    if (std::getenv("SEARCH_BENCH_HISTORY")) {  // how the best so far fell, for one configuration, and what won
      for (const auto& [seconds, makespan] : r.history) fmt::print(stderr, "{:8.3f} s  {:.2f}\n", seconds, makespan);
      fmt::print(stderr, "best: {}\n", r.best.family);
    }
    const double speedup = megatron / r.best.makespan;
    if (std::isfinite(speedup)) log_speedup += std::log(speedup), ++counted;
    fmt::print(
        "| {} | {} | {} | {} | {} {:.1f} GB | {:.0f}% | {} | {} | {} {:.1f} | {:.1f} | {:.3f}x | {:.3f}x | "
        "{:+.2f}% | {:+.1f}% | {:.2f} s | {} |\n",
        i, c.model, c.p, c.m, memory_name(c.memory), problem.memory_limit / 1e9, 100 * c.comm, cell(f),
        cell(interleaved), best_name, best_builtin, r.best.makespan, speedup, best_builtin / r.best.makespan,
        100 * (r.best.makespan / r.lower_bound - 1), 100 * (r.best.makespan / r.best.lower_bound - 1),
        time_to_one_percent(r), r.evaluated);
    std::fflush(stdout);
  }
  if (counted > 0)
    fmt::print("\ngeometric-mean speedup over the better of 1F1B and interleaved 1F1B: {:.3f}x\n",
               std::exp(log_speedup / counted));
}

// Small instances, the space restricted to one stage per device, the balanced partition and
// everything kept: the search's heuristic phases alone against the search with its branch and bound
// (the exact optimum over every per-device order when it proves it).
void print_small_instances(const HardwareProfile& hardware, double budget, int threads) {
  fmt::print(
      "\n| model | p | m | memory | comm | heuristic phases | with branch and bound | proven optimal | heuristic gap |\n");
  fmt::print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  const std::vector<Config> small = {{"gpt3-1.3b", 2, 4, Memory::Relaxed, 0},
                                     {"gpt3-1.3b", 4, 4, Memory::Relaxed, 0},
                                     {"bert-large", 3, 6, Memory::Tight, 0},
                                     {"t5-large", 4, 6, Memory::Relaxed, 0},
                                     {"llama2-7b", 4, 6, Memory::Tight, 0.1}};
  for (const Config& c : small) {
    SearchProblem problem = problem_for(c, hardware);
    problem.max_chunks = 1;
    problem.v_shape = false;
    problem.bidirectional = false;
    problem.memory_choices = false;
    SearchOptions options;
    options.time_budget = budget;
    options.threads = threads;
    options.partitioner = false;
    SearchOptions probe = options;
    probe.local_search = false;
    probe.exact = false;
    const SearchResult reference = search_schedules(problem, probe);
    const ScheduleCandidateReport* one = builtin(reference, "1f1b");
    double forward = 0;
    for (const StageCosts& s : one->costs.stages) forward += s.forward;
    problem.aggregation.device_link.latency = c.comm * forward / one->costs.stages.size();
    if (c.memory == Memory::Tight) problem.memory_limit = peak(*one) * 1.0001;
    options.builtin_candidates = false;  // the answer must lie in the exact search's space
    options.exact = false;
    const SearchResult heuristic = search_schedules(problem, options);
    options.exact = true;
    const SearchResult exact = search_schedules(problem, options);
    fmt::print("| {} | {} | {} | {} | {:.0f}% | {:.3f} | {:.3f} | {} | {:+.2f}% |\n", c.model, c.p, c.m,
               memory_name(c.memory), 100 * c.comm, heuristic.best.makespan, exact.best.makespan,
               exact.proven_optimal ? "yes"
               : exact.exhausted    ? "no (node limit)"
                                    : "no (time limit)",
               100 * (heuristic.best.makespan / exact.best.makespan - 1));
    std::fflush(stdout);
  }
}

// How far the lower bound lies below the true optimum, where the optimum is known: random
// transformer-like stages (F in [0.8, 1.2], I = 1.07 F x [0.8, 1.2], W = 0.45 F, transfers 0.02),
// loops of v chunks per device, branch and bound to optimality. At m = p filling and draining the
// pipeline is most of the step and the bound sees only part of it; at m = 2p it is nearly exact.
void print_bound_gaps(double budget) {
  fmt::print("\n| p | chunks | m | instances proven | mean gap of the optimum above the bound | largest |\n");
  fmt::print("| --- | --- | --- | --- | --- | --- |\n");
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  for (int p : {2, 3})
    for (int v : {2, 3, 4})
      for (int m : {p, 2 * p}) {
        if (p * v > 8) continue;
        double sum = 0, largest = 0;
        int proven = 0;
        for (int trial = 0; trial < 3; ++trial) {
          CostTable costs = uniform_costs(p * v, 1, 1, 1, 0.02);
          for (StageCosts& stage : costs.stages) {
            stage.forward = jitter(rng);
            stage.backward_input = 1.07 * stage.forward * jitter(rng);
            stage.backward_weight = 0.45 * stage.forward;
            stage.backward = stage.backward_input + stage.backward_weight;
          }
          const Schedule skeleton = make_schedule("bound", p, m, loop_placement(p, p * v));
          ExactOptions exact;
          exact.time_limit_seconds = budget;
          const ExactResult optimum = exact_schedule(skeleton, costs, true, exact);
          if (!optimum.proven_optimal) continue;
          double gap = optimum.makespan / schedule_lower_bound(skeleton, costs, true) - 1;
          if (std::abs(gap) < 1e-12) gap = 0;  // equal but for rounding
          sum += gap, largest = std::max(largest, gap), ++proven;
        }
        if (proven == 0) continue;
        fmt::print("| {} | {} | {} | {} | {:+.2f}% | {:+.2f}% |\n", p, v, m, proven, 100 * sum / proven, 100 * largest);
        std::fflush(stdout);
      }
}

}  // namespace

int main(int argc, char** argv) {
  double budget = 10;
  int threads = 1, only = -1;
  const char* usage = "usage: search_bench [--budget SECONDS] [--threads T] [--only N]\n";
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      fmt::print("{}", usage);
      return 0;
    }
    const bool known = flag == "--budget" || flag == "--threads" || flag == "--only";
    if (!known || i + 1 == argc) {
      fmt::print(stderr, "search_bench: {} '{}'\n{}", known ? "no value after" : "unknown option", flag, usage);
      return 2;
    }
    if (flag == "--budget")
      budget = std::atof(argv[i + 1]);
    else if (flag == "--threads")
      threads = std::atoi(argv[i + 1]);
    else
      only = std::atoi(argv[i + 1]);
  }
  const HardwareProfile& hardware = find_hardware("H100-80GB");
  fmt::print("budget {} s, {} thread(s), {}\n\n", budget, threads, hardware.name);
  print_zoo_table(hardware, budget, threads, only);
  if (only >= 0) return 0;
  print_small_instances(hardware, budget, threads);
  print_bound_gaps(budget);
  return 0;
}
