// The automated scheduler: what it returns validates, fits, round-trips through the language and is
// never slower than a built-in; tight memory, a global batch, impossible requests and the time budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "flexpipe/costs/hardware.h"
#include "flexpipe/costs/model_zoo.h"
#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/lang/program.h"
#include "flexpipe/lang/writer.h"
#include "flexpipe/partition/partitioner.h"
#include "flexpipe/schedules/builtin.h"
#include "flexpipe/search/exact_schedule.h"
#include "flexpipe/search/search.h"
#include "flexpipe/support/error.h"
#include "flexpipe/validate/validator.h"
#include "sanitized.h"

namespace flexpipe {
namespace {

SearchProblem problem(const std::string& model, int p, int m, double limit) {
  const HardwareProfile& hardware = find_hardware("H100-80GB");
  SearchProblem problem;
  problem.graph = build_model_graph(find_model(model), hardware);
  problem.devices = p;
  problem.batches = {{m, 1}};
  problem.memory_limit = limit;
  problem.aggregation.device_link = {0, link_bandwidth_per_ms(hardware, Interconnect::NvLink)};
  problem.aggregation.host_link = {0, link_bandwidth_per_ms(hardware, Interconnect::Pcie)};
  return problem;
}

SearchOptions quick(int threads = 1) {
  SearchOptions options;
  // No time budget: these searches end on their own, so that `exhausted` says so on any machine.
  options.time_budget = kInfinity;
  options.threads = threads;
  return options;
}

double fastest_fitting_builtin(const SearchResult& result) {
  double best = kInfinity;
  for (const ScheduleCandidateReport& b : result.builtins)
    if (b.skipped.empty() && b.fits) best = std::min(best, b.makespan);
  return best;
}

double peak(const ScheduleCandidateReport& r) { return *std::max_element(r.peak_memory.begin(), r.peak_memory.end()); }

// What every answer must satisfy: it validates, its simulation (lowered, with its own cost table)
// gives the reported makespan and fits the limit, and its program compiles back to the same schedule.
void expect_sound(const SearchResult& result, double limit, bool builtins_in_space = true) {
  ASSERT_TRUE(result.found);
  const ScheduleCandidateReport& best = result.best;
  EXPECT_TRUE(validate(best.schedule).empty());
  const SimResult sim = simulate(lower(best.schedule), best.costs);
  EXPECT_DOUBLE_EQ(sim.makespan, best.makespan);
  EXPECT_TRUE(sim.fits);
  for (const DeviceReport& d : sim.devices) EXPECT_LE(d.peak_memory, limit);
  if (builtins_in_space) {
    EXPECT_LE(best.makespan, fastest_fitting_builtin(result));
  }
  EXPECT_GE(best.makespan, best.lower_bound * (1 - 1e-12));
  const CompiledProgram compiled = compile_program(write_program(best.schedule), "search.fps");
  EXPECT_EQ(compiled.schedule, best.schedule);
}

TEST(ScheduleSearch, RelaxedMemoryBeatsEveryBuiltin) {
  const SearchProblem p = problem("gpt3-1.3b", 4, 8, 80e9);
  const SearchResult result = search_schedules(p, quick());
  expect_sound(result, 80e9);
  EXPECT_TRUE(result.exhausted);
  EXPECT_EQ(result.builtins.size(), builtin_schedules().size());
  // Split backward and more chunks remove most of 1F1B's bubble: at least 10% faster than it here.
  const auto one_f_one_b = std::find_if(result.builtins.begin(), result.builtins.end(),
                                        [](const ScheduleCandidateReport& b) { return b.name == "1f1b"; });
  ASSERT_NE(one_f_one_b, result.builtins.end());
  EXPECT_LT(result.best.makespan, 0.9 * one_f_one_b->makespan);
  EXPECT_GT(result.pruned, 0);  // the lower bound skipped candidates that could not win
}

// At the memory 1F1B itself needs, most built-ins do not fit; the search still beats 1F1B by filling
// bubbles within that memory.
TEST(ScheduleSearch, TightMemoryStaysWithinTheLimit) {
  SearchProblem p = problem("gpt3-1.3b", 4, 8, 80e9);
  const SearchResult relaxed = search_schedules(p, quick());
  const auto one_f_one_b = std::find_if(relaxed.builtins.begin(), relaxed.builtins.end(),
                                        [](const ScheduleCandidateReport& b) { return b.name == "1f1b"; });
  const double limit = peak(*one_f_one_b) * 1.001;
  p.memory_limit = limit;
  SearchOptions options = quick(2);
  options.partitioner = false;
  const SearchResult tight = search_schedules(p, options);
  expect_sound(tight, limit);
  EXPECT_LT(tight.best.makespan, one_f_one_b->makespan);
  EXPECT_GE(tight.best.makespan, relaxed.best.makespan);
}

// Below what keeping every activation needs, the answer recomputes or offloads some stage, and fits.
TEST(ScheduleSearch, MemoryDecisionsMakeATooSmallLimitFit) {
  const SearchProblem p = problem("llama2-7b", 8, 16, 30e9);
  SearchOptions options = quick(2);
  options.partitioner = false;   // the search's own memory choices suffice here (and DawnPiper's runs are slow)
  options.local_search = false;  // fitting is the point here, not the last percent
  const SearchResult result = search_schedules(p, options);
  expect_sound(result, 30e9);
  const bool decides = std::any_of(result.best.decisions.begin(), result.best.decisions.end(),
                                   [](MemoryDecision d) { return d != MemoryDecision::Keep; });
  EXPECT_TRUE(decides);
  for (const ScheduleCandidateReport& b : result.builtins) {
    if (!b.skipped.empty()) continue;
    EXPECT_FALSE(b.fits) << b.name;  // no built-in keeps everything within 30 GB
  }
}

// Offloading wins when the host link hides it: under a limit that needs memory decisions, a host
// link fast enough to make every transfer free gives an answer that offloads and is faster than the
// best answer over a link at 100 MB/s, where little can be offloaded and recompute does the rest.
TEST(ScheduleSearch, OffloadsWhenTheHostLinkHidesIt) {
  auto search = [](double host_bytes_per_ms) {
    SearchProblem p = problem("gpt3-1.3b", 4, 8, 15e9);
    p.aggregation.host_link = {0, host_bytes_per_ms};
    SearchOptions options = quick();
    options.partitioner = false;
    options.exact = false;
    options.max_evaluations = 1500;  // counted, so the outcome does not depend on the machine's speed
    return search_schedules(p, options);
  };
  const SearchResult fast = search(1e13), slow = search(1e5);
  expect_sound(fast, 15e9);
  expect_sound(slow, 15e9);
  auto offloads = [](const SearchResult& r) {
    return std::count(r.best.decisions.begin(), r.best.decisions.end(), MemoryDecision::Offload);
  };
  EXPECT_GT(offloads(fast), 0);
  EXPECT_LT(fast.best.makespan, slow.best.makespan);
}

// A given partition (a plan from the partitioner) is searched with its per-operator decisions: with
// the search's own memory choices turned off, only the plan fits under this limit, and the answer uses
// its cuts and decisions. The plan is told to offload the checkpoints of every stage that recomputes
// (the partitioner does not need to here): their RELOADs come right before R.
TEST(ScheduleSearch, SearchesWithAGivenPlan) {
  SearchProblem p = problem("llama2-7b", 8, 16, 30e9);
  p.memory_choices = false;
  PartitionProblem pp =
      make_partition_problem(p.graph, {1, p.graph.reference.seq_len}, make_builtin("1f1b", {8, 16, 0}), 30e9,
                             p.aggregation.host_link.bandwidth);
  const PartitionResult planned = partition_model(pp, PartitionMethod::Dawn);
  ASSERT_TRUE(planned.fits);
  GivenPartition given;
  given.name = "plan.json";
  std::vector<int> sizes;
  for (const StageResult& stage : planned.stages) {
    sizes.push_back(stage.end - stage.begin);
    given.decisions.insert(given.decisions.end(), stage.memory.decisions.begin(), stage.memory.decisions.end());
    given.offload_checkpoints.push_back(stage.memory.recompute_time > 0);
  }
  ASSERT_GT(std::count(given.offload_checkpoints.begin(), given.offload_checkpoints.end(), 1), 0);
  given.partition = partition_from_sizes(p.graph, sizes);
  p.partitions = {given};
  const SearchResult result = search_schedules(p, quick(2));
  expect_sound(result, 30e9);
  EXPECT_NE(result.best.family.find("plan.json partition"), std::string::npos) << result.best.family;
  EXPECT_EQ(result.best.partition, given.partition);
  EXPECT_EQ(result.best.decisions, given.decisions);
  int late = 0;
  for (const std::vector<Action>& list : result.best.schedule.device_actions)
    for (size_t i = 0; i + 1 < list.size(); ++i)
      if (list[i].kind == ActionKind::Reload &&
          given.offload_checkpoints[result.best.schedule.chunk_of_stage(list[i].stage)]) {
        EXPECT_EQ(list[i + 1], Action::make(ActionKind::R, list[i].stage, list[i].microbatch));
        ++late;
      }
  EXPECT_GT(late, 0);
}

// With a global batch the search also picks the micro-batch count; each split keeps the sample count.
TEST(ScheduleSearch, ChoosesTheMicroBatchCount) {
  SearchProblem p = problem("gpt3-1.3b", 4, 8, 80e9);
  p.batches = {{4, 4}, {8, 2}, {16, 1}};
  const SearchResult result = search_schedules(p, quick(2));
  expect_sound(result, 80e9);
  EXPECT_DOUBLE_EQ(result.best.batch.microbatches * result.best.batch.microbatch_size, 16);
}

// Small instances end with branch and bound: the answer is the optimum over every per-device order
// of the placement (checked against exact_schedule run on its own), and the search says it proved it.
TEST(ScheduleSearch, SmallInstancesAreProvedOptimal) {
  SearchProblem p = problem("gpt3-1.3b", 3, 4, 80e9);
  p.max_chunks = 1;
  p.v_shape = false;
  p.bidirectional = false;
  p.memory_choices = false;
  p.aggregation.device_link.latency = 0.5;  // transfers matter
  SearchOptions options = quick();
  options.builtin_candidates = false;
  const SearchResult result = search_schedules(p, options);
  expect_sound(result, 80e9, false);
  EXPECT_TRUE(result.proven_optimal);
  double optimum = kInfinity;
  for (bool split : {false, true})
    optimum =
        std::min(optimum,
                 exact_schedule(make_schedule("x", 3, 4, loop_placement(3, 3)), result.best.costs, split).makespan);
  EXPECT_NEAR(result.best.makespan, optimum, 1e-9 * optimum);
}

// With no more micro-batches than devices the branch and bound also takes placements of up to 16
// stages (here 3 or 4 chunks on 3 devices): it proves the optimum over the space, which lies below
// every heuristic order of the same search.
TEST(ScheduleSearch, BranchAndBoundImprovesFillAndDrainHeavyInstances) {
  SearchProblem p = problem("bert-large", 3, 3, 80e9);
  p.memory_choices = false;
  p.v_shape = false;
  p.bidirectional = false;
  SearchOptions options = quick();
  options.partitioner = false;
  options.exact = false;
  const SearchResult heuristic = search_schedules(p, options);
  options.exact = true;
  const SearchResult exact = search_schedules(p, options);
  expect_sound(exact, 80e9);
  EXPECT_TRUE(exact.proven_optimal);
  EXPECT_LT(exact.best.makespan, heuristic.best.makespan * (1 - 1e-3));
  EXPECT_NE(exact.best.family.find("branch and bound"), std::string::npos) << exact.best.family;
  EXPECT_GT(exact.best.schedule.num_stages(), 8) << exact.best.family;
}

// On the bidirectional pair each pipeline's first micro-batches queue behind the other's forwards on
// every device they cross, so the far end idles; the order polishing moves a micro-batch ahead on all
// devices at once. Its reordered answers must stay sound, and polishing never makes the answer worse.
TEST(ScheduleSearch, PolishingTheBidirectionalPairStaysSound) {
  SearchProblem p = problem("gpt3-1.3b", 8, 16, 80e9);
  p.max_chunks = 1;
  p.v_shape = false;
  p.memory_choices = false;
  SearchOptions options = quick();
  options.exact = false;
  options.builtin_candidates = false;
  const SearchResult polished = search_schedules(p, options);
  expect_sound(polished, 80e9, false);
  EXPECT_EQ(polished.best.schedule.num_pipelines, 2);
  options.local_search = false;
  const SearchResult listed = search_schedules(p, options);
  EXPECT_LE(polished.best.makespan, listed.best.makespan);
}

TEST(ScheduleSearch, ImpossibleRequestsSayWhatWouldBeNeeded) {
  // Parameters, gradients and Adam state of 7B parameters at 16 bytes each: 108 GB over 2 devices.
  SearchResult result = search_schedules(problem("llama2-7b", 2, 4, 40e9), quick());
  EXPECT_FALSE(result.found);
  EXPECT_NE(result.infeasible.find("at least 4 devices are needed (have 2)"), std::string::npos) << result.infeasible;
  // Enough devices for the weights, but not for one micro-batch's activations at this size.
  SearchProblem p = problem("gpt3-1.3b", 4, 8, 12e9);
  p.batches = {{8, 16}};
  result = search_schedules(p, quick());
  EXPECT_FALSE(result.found);
  EXPECT_NE(result.infeasible.find("try a micro-batch of"), std::string::npos) << result.infeasible;
  EXPECT_NE(result.infeasible.find("more devices"), std::string::npos) << result.infeasible;
}

// The budget is honoured: a budget spent before the first candidate stops the search (counted in
// simulations, not wall time, so the test cannot flake), and the answer is still a sound schedule.
TEST(ScheduleSearch, HonoursItsTimeBudget) {
  const SearchProblem p = problem("gpt3-1.3b", 4, 8, 80e9);
  const SearchResult full = search_schedules(p, quick());
  ASSERT_TRUE(full.exhausted);
  SearchOptions options = quick();
  options.time_budget = 1e-9;
  int reports = 0;
  options.progress = [&](const SearchProgress&) { ++reports; };
  const SearchResult result = search_schedules(p, options);
  EXPECT_FALSE(result.exhausted);
  EXPECT_LT(result.evaluated, full.evaluated / 10);  // stopped, where the full search went on
  EXPECT_GT(reports, 0);
  expect_sound(result, 80e9);
}

// The budget counts from the start it is given (the CLI's: before it reads the model), not from the
// call: a start an hour ago leaves nothing, and the answer is the one structure every search makes
// whatever its budget, and the built-ins. Every time reported counts from that start. The search
// reads a clock of the test's own, an hour after the start and a millisecond further at each reading,
// so nothing here depends on the machine's speed.
TEST(ScheduleSearch, CountsItsBudgetFromTheStartItIsGiven) {
  const SearchProblem p = problem("gpt3-1.3b", 4, 8, 80e9);
  SearchOptions options = quick();
  options.time_budget = 60;  // spent an hour ago
  const std::chrono::steady_clock::time_point start{};
  std::atomic<int64_t> readings = 0;
  options.start = start;
  options.clock = [&] { return start + std::chrono::hours(1) + std::chrono::milliseconds(readings++); };
  std::vector<double> reported;
  options.progress = [&](const SearchProgress& progress) { reported.push_back(progress.seconds); };
  const SearchResult result = search_schedules(p, options);
  EXPECT_FALSE(result.exhausted);
  EXPECT_GE(result.seconds, 3600);
  ASSERT_FALSE(reported.empty());
  for (double seconds : reported) EXPECT_GE(seconds, 3600);
  expect_sound(result, 80e9);
  const SearchResult full = search_schedules(p, quick());
  EXPECT_LT(result.evaluated, full.evaluated / 10);
}

// Under a simulation count (one thread, no branch and bound) every run gives the same schedule:
// `train --schedule auto` runs one search per rank and needs them to agree.
TEST(ScheduleSearch, ACountedSearchIsReproducible) {
  const SearchProblem p = problem("gpt3-1.3b", 4, 8, 18.1e9);
  SearchOptions options;
  options.threads = 1;
  options.exact = false;
  options.time_budget = kInfinity;  // the count bounds it, never the clock
  options.max_evaluations = 1500;
  const SearchResult first = search_schedules(p, options), second = search_schedules(p, options);
  EXPECT_EQ(first.evaluated, second.evaluated);
  EXPECT_EQ(first.best.schedule, second.best.schedule);
  EXPECT_EQ(first.best.family, second.best.family);
  expect_sound(first, 18.1e9);
}

// A search that ends before its budget gives the same answer (schedule, makespan and label) whatever
// the number of threads and the budget: equal makespans go by a total order of the candidates, the
// pruning reads the best at fixed points, a polishing cut short by its time share is done again
// whole, and branch and bound stops at a node count. Inputs: the tight GPT-3 case whose label used to
// flip between "dawn" and "dawn (greedy)", one that branch and bound settles, and a DAG cost graph
// read from a file. The short budget also cuts the early polishing's share; a run that does not end
// before it (a slow machine) is not compared. Without a budget every run must end on its own.
TEST(ScheduleSearch, ACompleteSearchDoesNotDependOnThreadsOrBudget) {
  if (test::kSanitized)
    GTEST_SKIP() << "75 s under the sanitizer (twelve complete searches); the Release run checks it";
  struct Case {
    std::string name;
    SearchProblem problem;
    bool exact;
  };
  std::vector<Case> cases = {{"gpt3-1.3b p=4 m=8 tight", problem("gpt3-1.3b", 4, 8, 18.1e9), false},
                             {"bert-large p=3 m=3", problem("bert-large", 3, 3, 80e9), true}};
  SearchProblem unet = problem("gpt3-1.3b", 4, 8, 90e6);
  unet.graph = load_cost_graph(std::string(FLEXPIPE_TEST_DATA) + "/unet-small.graph.json");
  cases.push_back({"unet-small p=4 m=8", unet, true});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::optional<SearchResult> reference;
    for (double budget : {kInfinity, 2.0})
      for (int threads : {1, 4}) {
        SearchOptions options;
        options.time_budget = budget;
        options.threads = threads;
        options.exact = c.exact;
        const SearchResult result = search_schedules(c.problem, options);
        if (budget == kInfinity) {
          ASSERT_TRUE(result.exhausted) << threads << " threads";
        }
        if (!result.exhausted) continue;
        if (!reference) {
          reference = result;
          continue;
        }
        SCOPED_TRACE(testing::Message() << threads << " threads, budget " << budget << " s");
        EXPECT_EQ(result.best.makespan, reference->best.makespan);
        EXPECT_EQ(result.best.family, reference->best.family);
        EXPECT_EQ(result.best.schedule, reference->best.schedule);
        EXPECT_EQ(result.proven_optimal, reference->proven_optimal);
        EXPECT_EQ(result.lower_bound, reference->lower_bound);
      }
  }
}

TEST(ScheduleSearch, RejectsBadProblems) {
  SearchProblem p = problem("gpt3-1.3b", 4, 8, 80e9);
  p.batches.clear();
  EXPECT_THROW(search_schedules(p, quick()), Error);
  p = problem("gpt3-1.3b", 0, 8, 80e9);
  EXPECT_THROW(search_schedules(p, quick()), Error);
  p = problem("gpt3-1.3b", 4, 8, -1);
  EXPECT_THROW(search_schedules(p, quick()), Error);
}

// How many times a micro-batch's activations cross from one node to another on the way through its
// pipeline (each crossing is also one for its gradient on the way back).
int node_crossings(const Schedule& schedule, const CostTable& costs) {
  int crossings = 0;
  for (int s = 0; s + 1 < schedule.stages_per_pipeline; ++s)
    crossings += !costs.same_node(schedule.stage_device[s], schedule.stage_device[s + 1]);
  return crossings;
}

// Two nodes of two devices (0 1 | 2 3) joined by a 1 GB/s link. By hand: a loop placement with c
// chunks per device runs the stages over the devices 0 1 2 3 0 1 2 3 ..., crossing between the nodes
// 2c - 1 times per micro-batch, c of them from device 1 to device 2; the V-shape (0 1 2 3 3 2 1 0)
// twice; one chunk per device, and each pipeline of the bidirectional pair, once. A crossing sends
// a stage's output, 2048 x 2048 bf16 values = 8.39 MB for gpt3-1.3b: 8.39 ms at 1 GB/s, more than a
// stage's forward (6.5 ms on an H100), and a directed link carries one transfer at a time. Flat, the
// answer is a loop with 4 chunks per device (142 ms: the most chunks, the smallest bubble); across
// the two nodes its link from device 1 to device 2 would carry 4 x 8 forward transfers, 268 ms per
// step, whatever the order. A placement that crosses once puts 8 transfers, 67 ms, on each directed
// link, less than half of a step, hidden behind the other stages' work. So the answer must move to
// one that crosses once, and beat the flat answer run across the nodes.
TEST(ScheduleSearch, ASlowLinkBetweenNodesKeepsEachPipelineCrossingItOnce) {
  SearchProblem p = problem("gpt3-1.3b", 4, 8, 80e9);
  const SearchResult flat = search_schedules(p, quick());
  ASSERT_TRUE(flat.found);
  p.aggregation.devices_per_node = 2;
  p.aggregation.inter_node_link = {0, 1e9 / 1e3};  // 1 GB/s in bytes per millisecond
  const SearchResult nodes = search_schedules(p, quick());
  expect_sound(nodes, 80e9);
  EXPECT_EQ(nodes.best.costs.devices_per_node, 2);
  CostTable two_level = flat.best.costs;
  two_level.devices_per_node = 2;
  two_level.inter_node_link = p.aggregation.inter_node_link;
  EXPECT_GT(node_crossings(flat.best.schedule, two_level), 1) << flat.best.family;
  EXPECT_EQ(node_crossings(nodes.best.schedule, two_level), 1) << nodes.best.family;
  // The crossing is the transfer the hand count says.
  const double transfer = two_level.inter_node_link.transfer_time(nodes.best.costs.stages[0].output_bytes);
  EXPECT_NEAR(transfer, 8.39, 0.01);
  EXPECT_GT(transfer, nodes.best.costs.stages[0].forward);
  // The flat answer across the nodes takes at least its forward transfers from device 1 to device 2.
  int one_to_two = 0;
  for (int s = 0; s + 1 < flat.best.schedule.stages_per_pipeline; ++s)
    one_to_two += flat.best.schedule.stage_device[s] == 1 && flat.best.schedule.stage_device[s + 1] == 2;
  const double flat_on_nodes = simulate(lower(flat.best.schedule), two_level).makespan;
  EXPECT_GE(flat_on_nodes, one_to_two * 8 * transfer);
  EXPECT_LT(nodes.best.makespan, flat_on_nodes) << flat.best.family << " vs " << nodes.best.family;
}

}  // namespace
}  // namespace flexpipe
