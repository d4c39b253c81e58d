// Writing a run's report as the JSON `flexpipe train --json` prints, and as its text lines.
#include "session/run_report.h"

#include <cstdio>

#include <fmt/format.h>

namespace flexpipe::runtime {

namespace {

nlohmann::json step_json(const StepRecord& s, bool counts_samples) {
  nlohmann::json entry = {{"step", s.step},
                          {"loss", s.loss},
                          {"seconds", s.seconds},
                          // A captured model's samples have no tokens (its seq_len is 1).
                          {counts_samples ? "samples_per_second" : "tokens_per_second", s.throughput},
                          {"peak_saved_bytes", s.peak_saved_bytes},
                          {"overhead_us_per_action", s.overhead_us_per_action}};
  if (s.learning_rate) entry["learning_rate"] = *s.learning_rate;
  if (s.grad_norm) entry["grad_norm"] = *s.grad_norm;
  entry["bubble"] = s.bubble;
  return entry;
}

}  // namespace

nlohmann::json to_json(const RunReport& r) {
  nlohmann::json j;
  j["schedule"] = r.schedule;
  j["ranks"] = r.ranks;
  j["data_parallel"] = r.data_parallel;
  j["microbatches"] = r.microbatches;
  j["stages"] = r.stages;
  j["data"] = r.data;
  j["first_step"] = r.first_step;
  j["steps"] = nlohmann::json::array();
  for (const StepRecord& s : r.steps) j["steps"].push_back(step_json(s, r.counts_samples));
  if (r.diverged_at_step) j["diverged_at_step"] = *r.diverged_at_step;
  if (r.timing) add_timing_json(*r.timing, j);
  if (r.verify)
    j["verify"] = {{"loss_difference", r.verify->loss_difference},
                   {"parameter_difference", r.verify->parameter_difference},
                   {"tensors_compared_on_rank_0", r.verify->tensors_compared_on_rank_0},
                   {"tolerance", r.verify->tolerance},
                   {"passed", r.verify->passed}};
  return j;
}

void print_text(const RunReport& r, bool progress) {
  fmt::print("{}: {} ranks ({} data-parallel), {} stages, {} micro-batches, data: {}\n", r.schedule, r.ranks,
             r.data_parallel, r.stages, r.microbatches, r.data);
  // Counted from 1, as train's progress lines and checkpoints count them (the JSON's "step" is the index).
  if (!progress)
    for (const StepRecord& s : r.steps)
      fmt::print("  step {}: loss {:.6f}  {:.1f} ms\n", s.step + 1, s.loss, 1e3 * s.seconds);
  if (!r.timing) return;
  print_timing(*r.timing);
  if (r.verify) {
    const VerifyReport& v = *r.verify;
    fmt::print("  verify: loss {:.3g}, parameters {:.3g} relative to the single-process run (tolerance {:.3g}): {}\n",
               v.loss_difference, v.parameter_difference, v.tolerance, v.passed ? "exact" : "MISMATCH");
  }
}

void print_progress(const StepRecord& s, int steps, bool counts_samples) {
  fmt::print("step {:>4}/{}  loss {:.4f}  {:>9.0f} {}/s  {:7.1f} ms  bubble {:4.1f}%", s.step + 1, steps, s.loss,
             s.throughput, counts_samples ? "samples" : "tokens", 1e3 * s.seconds, 100 * s.bubble);
  if (s.learning_rate) fmt::print("  lr {:.2e}", *s.learning_rate);
  if (s.grad_norm) fmt::print("  grad norm {:.3f}", *s.grad_norm);
  fmt::print("\n");
  std::fflush(stdout);
}

std::string with_suffix(const std::string& path, const std::string& suffix) {
  const size_t dot = path.find_last_of('.');
  const size_t slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix;
  return path.substr(0, dot) + suffix + path.substr(dot);
}

}  // namespace flexpipe::runtime
