// What one schedule's training run reports: its steps' numbers, its timing report and its check against
// the single-process run, filled by the session and written as `flexpipe train`'s JSON or text.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "session/timing_report.h"

namespace flexpipe::runtime {

// One training step, as every rank measured it.
struct StepRecord {
  int step = 0;  // counted from 0
  double loss = 0;
  double seconds = 0;                          // the slowest rank's
  double throughput = 0;                       // tokens per second, or samples per second for a captured model
  std::vector<double> peak_saved_bytes;        // per rank
  std::vector<double> overhead_us_per_action;  // per rank
  std::optional<double> learning_rate;         // with a learning-rate schedule
  std::optional<double> grad_norm;             // when clipping
  double bubble = 0;                           // this replica's measured bubble ratio
};

// The run against the single-process reference (--verify).
struct VerifyReport {
  double loss_difference = 0;       // relative, the largest over the steps
  double parameter_difference = 0;  // relative, the largest over the ranks' tensors
  int tensors_compared_on_rank_0 = 0;
  double tolerance = 0;
  bool passed = false;
};

struct RunReport {
  std::string schedule;
  int ranks = 0;
  int data_parallel = 1;
  int microbatches = 0;
  int stages = 0;
  std::string data;  // where the data came from
  int first_step = 0;
  bool counts_samples = false;  // a captured model's inputs need not be token sequences
  std::vector<StepRecord> steps;
  std::optional<int> diverged_at_step;
  std::optional<TimingReport> timing;
  std::optional<VerifyReport> verify;
};

nlohmann::json to_json(const RunReport& report);

// The run's lines of `flexpipe train`'s text output; with `progress`, the steps were printed as they ran.
void print_text(const RunReport& report, bool progress);

// One step's progress line (--progress), counted from 1 of `steps`.
void print_progress(const StepRecord& step, int steps, bool counts_samples);

// "dir/name.svg" + ".x" -> "dir/name.x.svg".
std::string with_suffix(const std::string& path, const std::string& suffix);

}  // namespace flexpipe::runtime
