// train --schedule auto: the measurements, the search over them, the margin, and the choice written down.
#include "flexpipe/workflow/auto_schedule.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include <unistd.h>

#include "flexpipe/interop/cost_graph_json.h"
#include "flexpipe/lang/writer.h"
#include "flexpipe/launch/launcher.h"
#include "flexpipe/launch/runtime_loader.h"
#include "flexpipe/search/search.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/train/rank_env.h"
#include "flexpipe/workflow/captured_plan.h"
#include "flexpipe/workflow/partition_forms.h"

namespace flexpipe {

namespace {

// What --schedule auto cannot do, said before anything is measured.
void check_auto_request(const TrainRequest& o, bool in_job, bool cached) {
  const std::string& captured = o.command.captured_model;
  if (!o.command.partition.empty() || !o.command.plan.empty())
    throw Error("--schedule auto chooses the partition itself: drop --partition / --plan");
  if (!captured.empty() && in_job)
    throw Error(fmt::format(
        "--schedule auto for a captured model is chosen once, before any rank starts: run `flexpipe train "
        "--model {} --schedule auto ...` without a launcher around it (it starts its own ranks), then give a job "
        "the plan and schedule it wrote (--plan {}, --schedule {})",
        captured, auto_path(captured, "plan.json"), auto_path(captured, "schedule.fps")));
  if (!captured.empty() && !o.profile.empty())
    throw Error(
        "--profile is for the built-in model; a captured model is searched with the times its capture measured");
  if (captured.empty() && in_job && !cached)
    throw Error(
        "--schedule auto inside a job that is already launched needs --profile FILE (an existing "
        "`flexpipe profile` output), so that every rank chooses from the same measurements");
}

void check_captured_for_search(const CostGraph& graph, const std::string& path) {
  if (!graph.capture)
    throw Error(
        fmt::format("--model {}: not a captured model (no capture record): write one with `flexpipe "
                    "capture FILE.py:FACTORY --input SHAPE -o {}`",
                    path, path));
  if (graph.capture->repeats == 0)
    throw Error(
        fmt::format("--schedule auto: {} holds no operator times (its capture record says 0 repeats), so every "
                    "schedule would look alike: capture it with `flexpipe capture` (which times every operator), "
                    "or name a schedule",
                    path));
}

// The built-in model measured where it trains, into `path` (a temporary file when empty). Returns the
// profile's exit code.
int measure_builtin_model(const TrainRequest& o, std::string& path) {
  const runtime::TrainingOptions& t = o.command.request.training;
  runtime::ProfileRequest profile;
  profile.model = trainable_config(o.command.model);
  profile.microbatch_size = t.microbatch_size;
  profile.dtype = t.dtype;
  profile.seed = t.seed;
  profile.device = o.command.request.device;  // measured where it trains; checked before it measures
  if (path.empty())
    path = (std::filesystem::temp_directory_path() / fmt::format("flexpipe-profile-{}.json", ::getpid())).string();
  profile.output = path;
  profile.quiet = true;  // the table is not for the training log
  // Not in a job: the ranks about to start are this machine's, and talk over loopback.
  profile.transport_port = free_tcp_port();
  return profile_runtime(profile);
}

// Whether the model has BatchNorm, whose running statistics every training forward moves.
bool updates_running_statistics(const CostGraph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(),
                     [](const OperatorNode& node) { return node.kind.starts_with("batchnorm"); });
}

// The search problem on the measured graph: host memory, so nothing to recompute or offload for.
SearchProblem auto_search_problem(const TrainRequest& o, CostGraph graph, int microbatches, bool keeps_statistics) {
  const runtime::TrainingOptions& t = o.command.request.training;
  SearchProblem problem;
  problem.graph = std::move(graph);
  problem.devices = pipeline_devices(o);
  problem.batches = {{microbatches, problem.graph.reference.microbatch_size}};
  problem.seq_len = problem.graph.reference.seq_len;
  problem.aggregation.parameter_bytes = problem.aggregation.gradient_bytes = t.dtype == "float64" ? 8 : 4;
  problem.aggregation.optimizer_bytes = 2 * problem.aggregation.parameter_bytes;
  problem.memory_choices = false;
  if (problem.graph.link) problem.aggregation.device_link = *problem.graph.link;
  // DualPipe's two pipelines would each move BatchNorm's running statistics with half the step's
  // micro-batches, so the trained statistics would not be one process's: not searched for such a model.
  if (keeps_statistics) problem.bidirectional = false;
  return problem;
}

// Where the search's own program is written: next to the captured graph or the profile, else in /tmp.
std::string searched_program_path(const TrainRequest& o) {
  const std::string& captured = o.command.captured_model;
  if (!captured.empty()) return auto_path(captured, "schedule") + ".fps";
  const std::filesystem::path base =
      o.profile.empty() ? std::filesystem::temp_directory_path() / fmt::format("flexpipe-auto-{}", ::getpid())
                        : std::filesystem::path(o.profile).replace_extension("");
  return base.string() + "-schedule.fps";
}

}  // namespace

std::string auto_path(const std::string& captured_model, const std::string& what) {
  return beside_graph(captured_model, "auto-" + what);
}

int resolve_auto_schedule(TrainRequest& o) {
  const bool in_job = runtime::in_launched_job();
  const bool cached = !o.profile.empty() && std::filesystem::exists(o.profile);
  const std::string captured = o.command.captured_model;
  check_auto_request(o, in_job, cached);
  std::string path = captured.empty() ? o.profile : captured;
  if (captured.empty() && !cached)
    if (const int code = measure_builtin_model(o, path); code != 0) return code;
  CostGraph graph = load_cost_graph(path);
  if (captured.empty() && o.profile.empty()) std::filesystem::remove(path);
  if (!captured.empty()) check_captured_for_search(graph, captured);
  const int devices = pipeline_devices(o);
  const int microbatches = o.command.schedule.microbatches > 0 ? o.command.schedule.microbatches : 2 * devices;
  const bool keeps_statistics = !captured.empty() && updates_running_statistics(graph);
  const SearchProblem problem = auto_search_problem(o, std::move(graph), microbatches, keeps_statistics);
  SearchOptions options;
  options.threads = 1;
  options.time_budget = 120;  // a backstop: the count below ends the search
  options.max_evaluations = 20000;
  options.exact = false;  // seconds of branch and bound on every rank's start, for small instances only
  const SearchResult result = search_schedules(problem, options);
  if (!result.found) throw Error(fmt::format("--schedule auto: {}", result.infeasible));
  const ScheduleCandidateReport* builtin = fastest_builtin(result);
  // Inside a launched job every rank chooses alone, and nodes with other core counts would disagree:
  // the rule for ranks that share cores is the launcher's, whose ranks are all on this machine.
  const unsigned cores = std::thread::hardware_concurrency();
  const int local_ranks = devices * o.command.request.data_parallel;
  const double margin =
      in_job ? o.auto_margin : training_margin(o.auto_margin, o.auto_margin_given, local_ranks, cores);
  const bool cores_shared = margin != o.auto_margin;
  const ScheduleCandidateReport& best = answer_to_train(result, margin);
  const bool within_margin = &best != &result.best;
  AutoChoice choice;
  choice.schedule = best.name;
  choice.searched_program = best.name == "search";
  if (choice.searched_program) {
    choice.schedule = searched_program_path(o);
    write_text_file(choice.schedule,
                    fmt::format("# train --schedule auto: {}\n", best.family) + write_program(best.schedule));
  }
  if (!in_job || runtime::rank_env_from_environment().rank == 0) {
    fmt::print(
        "auto: searched {} schedules with measured operator times ({}): fastest built-in {} {:.2f} ms, best "
        "{:.2f} ms ({}){}; chose {}{}\n",
        result.evaluated, problem.graph.name, builtin ? builtin->name : "none", builtin ? builtin->makespan : kInfinity,
        result.best.makespan, result.best.family,
        !within_margin ? ""
        : cores_shared
            ? fmt::format(" ({} ranks share this machine's {} cores: the predicted steps are lower estimates whose "
                          "error differs by schedule, so the fastest built-in; --auto-margin overrides)",
                          local_ranks, cores)
            : fmt::format(", less than --auto-margin {:g}% faster", 100 * o.auto_margin),
        choice.schedule,
        keeps_statistics ? " (not DualPipe: its two pipelines would split BatchNorm's running statistics)" : "");
    std::fflush(stdout);  // before the ranks print theirs
  }
  if (captured.empty()) {
    choice.partition = operators_spec(best.partition);
  } else {
    // The export cuts the model where the plan says: the search's partition becomes a plan file.
    PartitionPlan plan = plan_of_partition(problem.graph, best.partition,
                                           {captured, choice.schedule, problem.devices, microbatches, "search"});
    plan.summary = {{"step_time", best.makespan}, {"family", best.family}};
    choice.plan = write_plan_beside_graph(captured, "auto-plan.json", plan);
  }
  // The request carries the choice: the schedule, its partition, and a program's own shape.
  o.schedule = choice.schedule;
  o.command.partition = choice.partition;
  o.command.plan = choice.plan;
  if (choice.searched_program)
    o.command.schedule.devices = o.command.schedule.microbatches = o.command.schedule.chunks = 0;
  o.auto_choice = std::move(choice);
  return 0;
}

}  // namespace flexpipe
