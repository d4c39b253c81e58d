// One rank's training session: each schedule of the run request trained from the same initial weights,
// each step's numbers gathered from every rank into the run's report, checkpoints saved and resumed,
// a captured model's weights exported, and the result checked against the single-process run.
#pragma once
#include <chrono>
#include <map>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "builtin_model/data_source.h"
#include "builtin_model/reference_model.h"
#include "executor/executor.h"
#include "flexpipe/runtime/run_request.h"
#include "flexpipe/train/lr_schedule.h"
#include "scripted_model/scripted_reference.h"
#include "scripted_model/tensor_data.h"
#include "session/run_report.h"
#include "transport/transport.h"

namespace flexpipe::runtime {

struct RunOutcome {
  RunReport report;
  bool verified = true;
  bool diverged = false;  // a step's loss (or, when clipping, its gradient norm) was not finite
};

class TrainingSession {
 public:
  // Throws Error for a request this rank cannot train (optimizer, dtype, data, learning-rate schedule).
  TrainingSession(const RunRequest& request, Transport& world);

  RunOutcome train(const ScheduledRun& run, const HookRegistry& hooks);

 private:
  bool captured() const { return !request_.export_dir.empty(); }
  ModelPlan plan_for(const ScheduledRun& run) const;
  ExecutorOptions executor_options(int replica) const;
  nlohmann::json identity(const Schedule& schedule) const;
  // Runs step `step`, gathers every rank's numbers into its record; `traces` gets the job's traces by replica.
  StepRecord run_step(Executor& executor, const ModelPlan& plan, int step, int replica,
                      std::vector<MeasuredStep>& traces);
  // Stops the run at a step whose loss or gradient norm is not finite; says why on rank 0.
  bool diverged(const StepRecord& step, RunReport& report) const;
  void write_curve(const RunReport& report, const std::string& model, const Schedule& schedule) const;
  TimingReport timing(Executor& executor, const ScheduledRun& run, const ModelPlan& plan, const RunReport& report,
                      const std::vector<MeasuredStep>& steps) const;
  AggregationOptions aggregation_options(const ModelPlan& plan) const;
  int timing_warmup(int steps_run) const;
  std::string core_sharing_note() const;
  std::string output_path(const std::string& path, const std::string& schedule) const;

  int resume(Executor& executor, const nlohmann::json& identity);
  void save(Executor& executor, const nlohmann::json& identity, int next_step);

  ReferenceTraining reference_training(int microbatches) const;
  const ReferenceRun& reference(const ModelPlan& plan, int microbatches);
  const ScriptedReferenceRun& scripted_reference(const ModelPlan& plan, int microbatches);
  VerifyReport verify(const ModelPlan& plan, Executor& executor, const Schedule& schedule, const RunReport& report);

  const RunRequest& request_;
  Transport& world_;
  c10::Device device_;
  std::chrono::milliseconds timeout_;
  OptimizerConfig optimizer_;
  at::ScalarType dtype_ = at::kFloat;
  DataSource data_ = DataSource::synthetic(2, 0);
  std::optional<ExportManifest> manifest_;  // a captured model's
  std::optional<TensorData> tensors_;
  std::optional<LrSchedule> lr_;
  std::map<int, ReferenceRun> references_;
  std::map<int, ScriptedReferenceRun> scripted_references_;
};

}  // namespace flexpipe::runtime
