// One rank's training session: the step loop of each schedule, its checkpoints, its curve and its check
// against the single-process run; the timing report and the weight export are their own files.
#include "session/training_session.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include "device/torch_device.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/files.h"
#include "flexpipe/views/views.h"
#include "session/checkpoint.h"
#include "session/rank_collectives.h"
#include "session/weight_export.h"

namespace flexpipe::runtime {

TrainingSession::TrainingSession(const RunRequest& request, Transport& world)
    : request_(request), world_(world), device_(training_device(request.device, request.env)) {
  timeout_ = std::chrono::milliseconds(static_cast<int64_t>(request.timeout_seconds * 1000));
  optimizer_.kind = request.training.optimizer;
  optimizer_.learning_rate = request.training.learning_rate;
  optimizer_.weight_decay = request.training.weight_decay;
  check_optimizer(optimizer_);
  if (request.training.dtype != "float32" && request.training.dtype != "float64")
    throw Error(fmt::format("dtype '{}': use float32 or float64", request.training.dtype));
  dtype_ = request.training.dtype == "float64" ? at::kDouble : at::kFloat;
  if (captured()) {
    manifest_ = read_export_manifest(request.export_dir);
    tensors_ = request.training.data.empty() ? TensorData::synthetic(*manifest_, request.training.seed)
                                             : TensorData::from_file(request.training.data, *manifest_);
  } else {
    data_ = request.training.data.empty() ? DataSource::synthetic(request.model.vocab, request.training.seed)
                                          : DataSource::text_file(request.training.data, request.training.seed);
  }
  if (!captured() && data_.vocab() > request.model.vocab)
    throw Error(fmt::format("{} has {} token values but the model's vocabulary is {}", data_.description(),
                            data_.vocab(), request.model.vocab));
  if (request.training.lr_schedule) {
    lr_ = LrSchedule{request.training.learning_rate, request.training.warmup_steps, request.training.decay_steps,
                     request.training.min_lr_ratio};
    if (lr_->decay_steps == 0) lr_->decay_steps = std::max(0, request.training.steps - lr_->warmup_steps);
    check_lr_schedule(*lr_);
  }
}

RunOutcome TrainingSession::train(const ScheduledRun& run, const HookRegistry& hooks) {
  const Schedule& schedule = run.schedule;
  const int devices = schedule.num_devices;
  const int replicas = request_.data_parallel, replica = world_.rank() / devices;
  if (world_.world_size() != devices * replicas)
    throw Error(fmt::format("{} on {} devices x {} data-parallel copies needs {} ranks; the job has {}", schedule.name,
                            devices, replicas, devices * replicas, world_.world_size()));
  std::vector<int> group;
  for (int d = 0; d < devices; ++d) group.push_back(replica * devices + d);
  const std::unique_ptr<Transport> pipeline = make_group_view(world_, group);
  const ModelPlan plan = plan_for(run);
  Executor executor(schedule, plan, *pipeline, hooks, executor_options(replica));
  // Each copy of a chunk moves the statistics with its own micro-batches; pipeline 0's of replica 0
  // are exported (as DDP keeps rank 0's buffers). The parameters are not affected.
  if (world_.rank() == 0 && captured() && (schedule.num_pipelines > 1 || replicas > 1) &&
      updates_buffers(*plan.scripted))
    fmt::print(stderr,
               "warning: {}: each {} moves BatchNorm's running statistics with its own micro-batches only, and "
               "the trained statistics are those of {}: they differ from one process's (the parameters do not)\n",
               schedule.name, replicas > 1 ? "data-parallel copy" : "of the two pipelines",
               replicas > 1 ? "copy 0" : "pipeline 0");
  const nlohmann::json identity = this->identity(schedule);
  int first_step = 0;
  if (request_.resume) first_step = resume(executor, identity);

  RunOutcome outcome;
  RunReport& report = outcome.report;
  report.schedule = schedule.name;
  report.ranks = world_.world_size();
  report.data_parallel = replicas;
  report.microbatches = schedule.num_microbatches;
  report.stages = schedule.num_stages();
  report.data = captured() ? tensors_->description() : data_.description();
  report.first_step = first_step;
  report.counts_samples = captured();
  std::vector<MeasuredStep> timed;  // replica 0's traces of the steps after the timing warm-up
  const int timed_from = first_step + timing_warmup(request_.training.steps - first_step);
  for (int step = first_step; step < request_.training.steps; ++step) {
    std::vector<MeasuredStep> traces;
    report.steps.push_back(run_step(executor, plan, step, replica, traces));
    if (request_.progress && world_.rank() == 0)
      print_progress(report.steps.back(), request_.training.steps, report.counts_samples);
    if (step >= timed_from || step + 1 == request_.training.steps) {
      // A run shorter than its warm-up is timed on its last step alone.
      if (step < timed_from) timed.clear();
      timed.push_back(std::move(traces[0]));
    }
    if (diverged(report.steps.back(), report)) {
      outcome.diverged = true;
      break;
    }
    if (!request_.checkpoint_dir.empty() &&
        ((request_.save_every > 0 && (step + 1) % request_.save_every == 0) || step + 1 == request_.training.steps))
      save(executor, identity, step + 1);
  }
  if (!timed.empty()) {
    report.timing = timing(executor, run, plan, report, timed);
    if (world_.rank() == 0) {
      const std::string& name = executor.lowered().name;
      write_timelines(*report.timing, executor.lowered(),
                      request_.trace_path.empty() ? "" : output_path(request_.trace_path, name),
                      request_.svg_path.empty() ? "" : output_path(request_.svg_path, name));
    }
  }
  if (!request_.export_weights.empty() && !outcome.diverged)
    export_weights(*manifest_, executor.state(), schedule, replica, world_,
                   {request_.export_weights, request_.json || request_.export_weights_quietly,
                    request_.training.steps - 1, timeout_});
  if (world_.rank() == 0 && !request_.curve_path.empty() && !report.steps.empty())
    write_curve(report, identity["model"].get<std::string>(), schedule);
  if (request_.verify && !outcome.diverged) {
    report.verify = verify(plan, executor, schedule, report);
    outcome.verified = report.verify->passed;
  }
  return outcome;
}

ModelPlan TrainingSession::plan_for(const ScheduledRun& run) const {
  return captured() ? make_scripted_plan(request_.captured_graph, run.partition, request_.export_dir, dtype_,
                                         request_.training.seed)
                    : make_model_plan(request_.model, run.partition, request_.training.microbatch_size, dtype_,
                                      request_.training.seed);
}

ExecutorOptions TrainingSession::executor_options(int replica) const {
  ExecutorOptions options;
  options.optimizer = optimizer_;
  options.device = device_;
  options.timeout = timeout_;
  options.fault = request_.fault;
  options.replicas = request_.data_parallel;
  options.replica = replica;
  options.world = &world_;
  options.max_grad_norm = request_.training.max_grad_norm;
  options.memory_decisions = request_.memory_decisions;
  options.offload_checkpoints = request_.offload_checkpoints;
  return options;
}

nlohmann::json TrainingSession::identity(const Schedule& schedule) const {
  return {{"model", captured() ? request_.captured_graph.name : request_.model.name},
          {"schedule", schedule.name},
          {"seed", request_.training.seed},
          {"devices", schedule.num_devices},
          {"replicas", request_.data_parallel},
          {"microbatches", schedule.num_microbatches},
          {"dtype", request_.training.dtype}};
}

StepRecord TrainingSession::run_step(Executor& executor, const ModelPlan& plan, int step, int replica,
                                     std::vector<MeasuredStep>& traces) {
  const Schedule& lowered = executor.lowered();
  const int m = lowered.num_microbatches, replicas = request_.data_parallel;
  const double rate = lr_ ? learning_rate(*lr_, step) : -1;
  const StepReport last =
      executor.run_step(step,
                        captured() ? tensors_->batch(step, replica * m, m, m * replicas)
                                   : data_.batch(step, replica * m, m, plan.microbatch_size, plan.seq_len),
                        rate);
  StepRecord record;
  record.step = step;
  record.loss = last.loss;
  collective(world_, step, "gathering every rank's time and memory of the step", [&] {
    const std::vector<double> seconds = gather(world_, last.seconds, timeout_);
    record.seconds = *std::max_element(seconds.begin(), seconds.end());
    record.peak_saved_bytes = gather(world_, double(last.peak_saved_bytes), timeout_);
    record.overhead_us_per_action =
        gather(world_, last.overhead_ns / 1e3 / std::max<double>(1, double(last.actions)), timeout_);
  });
  // A captured model counts samples: its inputs need not be token sequences.
  record.throughput = double(m) * replicas * plan.microbatch_size * plan.seq_len / record.seconds;
  if (lr_) record.learning_rate = rate;
  if (request_.training.max_grad_norm > 0) record.grad_norm = last.grad_norm;
  // Every step's trace, outside its timing: the report is over many steps, not the last one.
  collective(world_, step, "gathering every rank's trace of the step",
             [&] { traces = split_by_replica(gather_all_traces(world_, last.trace, timeout_), lowered.num_devices); });
  record.bubble = measured_result(lowered, traces[replica]).bubble_ratio;
  return record;
}

bool TrainingSession::diverged(const StepRecord& step, RunReport& report) const {
  const bool norm_finite = !step.grad_norm || std::isfinite(*step.grad_norm);
  if (std::isfinite(step.loss) && norm_finite) return false;
  // Every rank holds the same summed loss, so every rank stops at the same step. The parameters this
  // step produced are not finite: nothing of it is saved, and the last checkpoint stays the one to
  // resume from.
  report.diverged_at_step = step.step;
  if (world_.rank() == 0)
    fmt::print(stderr,
               "error: step {}/{}: the loss is {}{}: training diverged and stops here, without saving this "
               "step (lower --lr, or clip gradients with --clip)\n",
               step.step + 1, request_.training.steps, step.loss,
               norm_finite ? "" : fmt::format(", the gradient norm {}", *step.grad_norm));
  return true;
}

void TrainingSession::write_curve(const RunReport& report, const std::string& model, const Schedule& schedule) const {
  std::vector<double> losses;
  for (const StepRecord& s : report.steps)
    if (std::isfinite(s.loss)) losses.push_back(s.loss);
  const std::string data = request_.training.data.empty()
                               ? std::string("synthetic data")
                               : std::filesystem::path(request_.training.data).filename().string();
  const std::string title =
      fmt::format("{} with {} on {} devices, {}", model, schedule.name, schedule.num_devices, data);
  const std::string axis =
      captured() ? fmt::format("loss ({})", manifest_->loss.kind) : std::string("loss (mean next-token cross-entropy)");
  write_text_file(output_path(request_.curve_path, schedule.name),
                  render_curve_svg(title, axis, losses, report.first_step));
}

TimingReport TrainingSession::timing(Executor& executor, const ScheduledRun& run, const ModelPlan& plan,
                                     const RunReport& report, const std::vector<MeasuredStep>& steps) const {
  return make_timing_report({executor.lowered(), steps, report.steps.back().step, report.steps.back().peak_saved_bytes,
                             plan.graph, run.partition, aggregation_options(plan), plan.scripted != nullptr,
                             core_sharing_note()});
}

AggregationOptions TrainingSession::aggregation_options(const ModelPlan& plan) const {
  AggregationOptions o;
  o.shape = plan.graph.reference;
  o.decisions = request_.memory_decisions;
  o.offload_checkpoints = request_.offload_checkpoints;
  o.parameter_bytes = o.gradient_bytes = plan.dtype == at::kDouble ? 8 : 4;
  o.optimizer_bytes = state_tensors_per_parameter(optimizer_) * o.parameter_bytes;
  return o;
}

int TrainingSession::timing_warmup(int steps_run) const {
  if (request_.timing_warmup >= 0) return request_.timing_warmup;
  return steps_run >= 2 ? std::max(1, steps_run / 5) : 0;
}

// More computing threads on this machine than it has cores: ranks wait for a core, which the
// simulation (a device per rank, each with its own) does not model.
std::string TrainingSession::core_sharing_note() const {
  const unsigned cores = std::thread::hardware_concurrency();
  const int threads = at::get_num_threads(), ranks = request_.env.local_world_size;
  if (cores == 0 || static_cast<int64_t>(ranks) * threads <= static_cast<int64_t>(cores)) return "";
  return fmt::format(
      "{} ranks of {} thread{} share this machine's {} cores: they wait for a core, which the simulation (each "
      "rank a device of its own) does not model; expect the measured step to be longer than predicted",
      ranks, threads, threads == 1 ? "" : "s", cores);
}

// With several schedules in one run, each file gets the schedule's name before its extension.
std::string TrainingSession::output_path(const std::string& path, const std::string& schedule) const {
  return request_.runs.size() == 1 ? path : with_suffix(path, "." + schedule);
}

int TrainingSession::resume(Executor& executor, const nlohmann::json& identity) {
  const std::string& dir = request_.checkpoint_dir;
  const int step = latest_checkpoint(dir);
  if (step < 0) throw Error(fmt::format("--resume: {} holds no complete checkpoint ({}/latest is missing)", dir, dir));
  RankCheckpoint saved;
  try {
    saved = read_rank_checkpoint(checkpoint_path(dir, step, world_.rank()));
  } catch (const Error& e) {
    // Not resumed from silently: the previous checkpoint this rank can read is named, and the user
    // chooses it by moving `latest` back.
    int previous = -1;
    for (int earlier : checkpoint_steps(dir)) {
      if (earlier >= step) continue;
      try {
        read_rank_checkpoint(checkpoint_path(dir, earlier, world_.rank()));
        previous = earlier;
        break;
      } catch (const Error&) {}
    }
    throw Error(fmt::format("--resume: the latest checkpoint (step {}) is damaged: {}; {}", step, e.what(),
                            previous < 0 ? std::string("no earlier checkpoint of this rank reads either")
                                         : fmt::format("the previous one, step {}, reads: to resume from it, write "
                                                       "{} into {}/latest",
                                                       previous, previous, dir)));
  }
  if (saved.identity != identity)
    throw Error(fmt::format("--resume: the checkpoint at step {} was written by another run ({}), not this one ({})",
                            step, saved.identity.dump(), identity.dump()));
  executor.load_state(saved.tensors, saved.optimizer_steps);
  if (world_.rank() == 0 && !request_.json)
    fmt::print("resumed from {}: step {} of {} is next\n",
               std::filesystem::path(checkpoint_path(dir, step, 0)).parent_path().string(), saved.step + 1,
               request_.training.steps);
  return saved.step;
}

void TrainingSession::save(Executor& executor, const nlohmann::json& identity, int next_step) {
  RankCheckpoint checkpoint;
  checkpoint.step = next_step;
  checkpoint.optimizer_steps = executor.optimizer_steps();
  checkpoint.identity = identity;
  checkpoint.tensors = executor.state();
  write_rank_checkpoint(checkpoint_path(request_.checkpoint_dir, next_step, world_.rank()), checkpoint);
  // Only once every rank's file is in place does `latest` move.
  collective(world_, next_step - 1, "waiting for every rank to write its checkpoint",
             [&] { world_.barrier(timeout_); });
  if (world_.rank() == 0) mark_latest_checkpoint(request_.checkpoint_dir, next_step);
  collective(world_, next_step - 1, "waiting for rank 0 to mark the checkpoint the latest",
             [&] { world_.barrier(timeout_); });
  if (world_.rank() == 0 && !request_.json)
    fmt::print("checkpoint: step {} saved in {}\n", next_step,
               std::filesystem::path(checkpoint_path(request_.checkpoint_dir, next_step, 0)).parent_path().string());
}

ReferenceTraining TrainingSession::reference_training(int microbatches) const {
  ReferenceTraining training;
  training.microbatches = microbatches;
  training.steps = request_.training.steps;
  training.optimizer = optimizer_;
  training.learning_rate = lr_;
  training.max_grad_norm = request_.training.max_grad_norm;
  return training;
}

const ReferenceRun& TrainingSession::reference(const ModelPlan& plan, int microbatches) {
  auto it = references_.find(microbatches);
  if (it == references_.end())
    it = references_.emplace(microbatches, train_reference(plan, data_, reference_training(microbatches))).first;
  return it->second;
}

// A captured model's single-process run (scripted_reference.h), once per micro-batch count.
const ScriptedReferenceRun& TrainingSession::scripted_reference(const ModelPlan& plan, int microbatches) {
  auto it = scripted_references_.find(microbatches);
  if (it == scripted_references_.end())
    it = scripted_references_
             .emplace(microbatches,
                      train_scripted_reference(*plan.scripted, *tensors_, reference_training(microbatches), plan.seed))
             .first;
  return it->second;
}

VerifyReport TrainingSession::verify(const ModelPlan& plan, Executor& executor, const Schedule& schedule,
                                     const RunReport& report) {
  const int microbatches = schedule.num_microbatches * request_.data_parallel;
  const std::vector<double>& losses =
      captured() ? scripted_reference(plan, microbatches).losses : reference(plan, microbatches).losses;
  double loss_difference = 0;
  for (const StepRecord& step : report.steps) {
    const double got = step.loss, want = losses[step.step];
    loss_difference = std::max(loss_difference, std::abs(got - want) / std::max(std::abs(want), 1e-300));
  }
  double worst = 0;
  std::string worst_name;
  int compared = 0;
  auto compare = [&](const at::Tensor& got, const at::Tensor& want, const std::string& name) {
    ++compared;
    const double d = relative_difference(got, want);
    if (d > worst || worst_name.empty()) worst = d, worst_name = name;
  };
  if (captured()) {
    // Every parameter and buffer this rank holds ("stage{S}.{name}", "stage{S}.buffer.{name}").
    const ScriptedReferenceRun& ref = scripted_reference(plan, microbatches);
    for (const auto& [entry, tensor] : executor.state()) {
      const size_t dot = entry.find('.');
      const int stage = std::stoi(entry.substr(5, dot - 5));
      std::string name = entry.substr(dot + 1);
      if (name.starts_with("adam_")) continue;
      if (name.starts_with("buffer.")) name = name.substr(7);
      const at::Tensor want = scripted_tensor(ref.chunks[schedule.chunk_of_stage(stage)], name);
      if (want.defined()) compare(tensor, want, fmt::format("{} (stage {})", name, stage));
    }
  } else {
    const ReferenceRun& ref = reference(plan, microbatches);
    for (int stage : executor.local_stages())
      for (const auto& [node, params] : executor.stage_parameters(stage))
        for (size_t i = 0; i < params.size(); ++i)
          compare(params[i], ref.parameters[node][i],
                  fmt::format("{}[{}] (stage {})", plan.graph.nodes[node].name, i, stage));
  }
  std::vector<double> per_rank;
  collective(world_, request_.training.steps - 1, "comparing the parameters with the single-process run",
             [&] { per_rank = gather(world_, worst, timeout_); });
  const double parameter_difference = *std::max_element(per_rank.begin(), per_rank.end());
  const bool passed = loss_difference <= request_.tolerance && parameter_difference <= request_.tolerance;
  if (worst > request_.tolerance)
    fmt::print(stderr, "rank {}: {}: parameter {} differs from the single-process run by {:.3g} (relative)\n",
               world_.rank(), schedule.name, worst_name, worst);
  return {loss_difference, parameter_difference, compared, request_.tolerance, passed};
}

}  // namespace flexpipe::runtime
