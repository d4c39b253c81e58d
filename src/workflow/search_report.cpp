// flexpipe search's report: sizes and limits in the input's units, the JSON document, the written program.
#include "flexpipe/workflow/search_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "flexpipe/lang/writer.h"
#include "flexpipe/workflow/partition_forms.h"

namespace flexpipe {

namespace {

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
  j["operators_per_stage"] = operators_per_stage(r.partition);
  return j;
}

}  // namespace

std::string memory_text(const SearchProblem& problem, double amount) {
  if (!problem.stage_costs) return format_bytes(amount, problem.byte_units);
  if (!std::isfinite(amount)) return "unlimited";
  const std::string& unit = problem.stage_costs->costs.memory_unit;
  return unit == "unit" ? fmt::format("{:.4g}", amount) : fmt::format("{:.4g} {}", amount, unit);
}

std::string limit_text(const SearchProblem& problem) {
  if (!problem.stage_costs || problem.memory_limit < kInfinity) return memory_text(problem, problem.memory_limit);
  const std::vector<double>& capacity = problem.stage_costs->costs.memory_capacity;
  if (capacity.empty()) return "no memory limit";
  std::string text;
  for (double c : capacity) text += (text.empty() ? "" : ", ") + memory_text(problem, c);
  return text;
}

double largest(const std::vector<double>& values) {
  double out = 0;
  for (double v : values) out = std::max(out, v);
  return out;
}

nlohmann::json search_report_json(const SearchRun& run) {
  const SearchProblem& problem = run.problem;
  const SearchResult& result = run.result;
  nlohmann::json j = {{problem.stage_costs ? "costs" : "model", problem.graph.name},
                      {"devices", problem.devices},
                      {"memory_limit", problem.memory_limit},
                      {"time_unit", problem.graph.time_unit},
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
                 {"threads", run.options.threads},
                 {"history", history},
                 {"phases", phases}};
  if (!result.found) j["infeasible"] = result.infeasible;
  return j;
}

std::string searched_program_text(const SearchRun& run) {
  const SearchProblem& problem = run.problem;
  const ScheduleCandidateReport& b = run.result.best;
  const std::string batch = problem.stage_costs
                                ? fmt::format("{} micro-batches", b.batch.microbatches)
                                : fmt::format("{} micro-batches of {}", b.batch.microbatches, b.batch.microbatch_size);
  const std::string header = fmt::format(
      "# flexpipe search: {} on {} devices, {}, limit {} per device\n# {}\n# simulated makespan "
      "{:.6g} {}, lower bound {:.6g}, peak {}{}\n",
      problem.graph.name, problem.devices, batch, limit_text(problem), b.family, b.makespan, problem.graph.time_unit,
      b.lower_bound, memory_text(problem, largest(b.peak_memory)), b.fits ? "" : " (DOES NOT FIT)");
  return header + write_program(b.schedule);
}

}  // namespace flexpipe
