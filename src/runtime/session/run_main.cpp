// The runtime library's entry point: one rank of `flexpipe run`. Connects to the other ranks, trains
// every requested schedule from the same initial weights, optionally checks the result against the
// single-process reference, and has rank 0 print the report and write the measured timeline.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string_view>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/accumulate.h>
#include <fmt/format.h>
#include <torch/serialize.h>
#include <nlohmann/json.hpp>

#include "builtin_model/data_source.h"
#include "builtin_model/reference_model.h"
#include "device/compute_priority.h"
#include "device/host_allocator.h"
#include "device/torch_device.h"
#include "executor/executor.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/interop/schedule_io.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/runtime/entry.h"
#include "flexpipe/sim/simulator.h"
#include "flexpipe/support/error.h"
#include "flexpipe/support/exit_status.h"
#include "flexpipe/support/files.h"
#include "flexpipe/support/quantity.h"
#include "flexpipe/support/statistics.h"
#include "flexpipe/train/lr_schedule.h"
#include "flexpipe/train/measured_timeline.h"
#include "flexpipe/views/views.h"
#include "scripted_model/scripted_reference.h"
#include "scripted_model/tensor_data.h"
#include "session/checkpoint.h"
#include "transport/transport.h"
#include "transport/transport_registry.h"

namespace flexpipe::runtime {

namespace {

// Width over height of the measured timelines: a wide screen's shape, readable without scrolling.
constexpr double kMeasuredTimelineAspect = 4;

using Milliseconds = std::chrono::milliseconds;

// Every rank's value of `x`, in rank order, on every rank.
std::vector<double> gather(Transport& transport, double x, Milliseconds timeout) {
  at::Tensor slots = at::zeros({transport.world_size()}, at::TensorOptions().dtype(at::kDouble));
  slots[transport.rank()] = x;
  transport.all_reduce_sum(slots, timeout);
  std::vector<double> values(transport.world_size());
  for (int r = 0; r < transport.world_size(); ++r) values[r] = slots[r].item<double>();
  return values;
}

// Every rank's trace of the step, on every rank (padded to the longest list).
std::vector<std::vector<MeasuredAction>> gather_all_traces(Transport& transport, const std::vector<ActionRecord>& mine,
                                                           Milliseconds timeout) {
  const std::vector<double> counts = gather(transport, double(mine.size()), timeout);
  const int64_t longest = static_cast<int64_t>(*std::max_element(counts.begin(), counts.end()));
  at::Tensor all =
      at::zeros({transport.world_size(), std::max<int64_t>(longest, 1), 4}, at::TensorOptions().dtype(at::kLong));
  auto own = all[transport.rank()];
  for (size_t i = 0; i < mine.size(); ++i) {
    own[i][0] = mine[i].index;
    own[i][1] = mine[i].start_ns;
    own[i][2] = mine[i].end_ns;
    own[i][3] = mine[i].wait_ns;
  }
  transport.all_reduce_sum(all, timeout);
  std::vector<std::vector<MeasuredAction>> devices(transport.world_size());
  const auto table = all.accessor<int64_t, 3>();
  for (int r = 0; r < transport.world_size(); ++r)
    for (int64_t i = 0; i < static_cast<int64_t>(counts[r]); ++i)
      devices[r].push_back(
          {static_cast<int32_t>(table[r][i][0]), table[r][i][1] / 1e6, table[r][i][2] / 1e6, table[r][i][3] / 1e6});
  return devices;
}

struct RunOutcome {
  nlohmann::json json;
  bool verified = true;
  bool diverged = false;  // a step's loss (or, when clipping, its gradient norm) was not finite
};

class RankJob {
 public:
  RankJob(const RunRequest& request, Transport& world)
      : request_(request), world_(world), device_(training_device(request.device, request.env)) {
    timeout_ = Milliseconds(static_cast<int64_t>(request.timeout_seconds * 1000));
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

  RunOutcome train(const ScheduledRun& run, const HookRegistry& hooks) {
    const Schedule& schedule = run.schedule;
    const int m = schedule.num_microbatches, devices = schedule.num_devices;
    const int replicas = request_.data_parallel, replica = world_.rank() / devices;
    if (world_.world_size() != devices * replicas)
      throw Error(fmt::format("{} on {} devices x {} data-parallel copies needs {} ranks; the job has {}",
                              schedule.name, devices, replicas, devices * replicas, world_.world_size()));
    std::vector<int> group;
    for (int d = 0; d < devices; ++d) group.push_back(replica * devices + d);
    const std::unique_ptr<Transport> pipeline = make_group_view(world_, group);
    const ModelPlan plan = captured()
                               ? make_scripted_plan(request_.captured_graph, run.partition, request_.export_dir, dtype_,
                                                    request_.training.seed)
                               : make_model_plan(request_.model, run.partition, request_.training.microbatch_size,
                                                 dtype_, request_.training.seed);
    ExecutorOptions options;
    options.optimizer = optimizer_;
    options.device = device_;
    options.timeout = timeout_;
    options.fault = request_.fault;
    options.replicas = replicas;
    options.replica = replica;
    options.world = &world_;
    options.max_grad_norm = request_.training.max_grad_norm;
    options.memory_decisions = request_.memory_decisions;
    options.offload_checkpoints = request_.offload_checkpoints;
    Executor executor(schedule, plan, *pipeline, hooks, options);
    // Each copy of a chunk moves the statistics with its own micro-batches; pipeline 0's of replica 0
    // are exported (as DDP keeps rank 0's buffers). The parameters are not affected.
    if (world_.rank() == 0 && captured() && (schedule.num_pipelines > 1 || replicas > 1) &&
        updates_buffers(*plan.scripted))
      fmt::print(stderr,
                 "warning: {}: each {} moves BatchNorm's running statistics with its own micro-batches only, and "
                 "the trained statistics are those of {}: they differ from one process's (the parameters do not)\n",
                 schedule.name, replicas > 1 ? "data-parallel copy" : "of the two pipelines",
                 replicas > 1 ? "copy 0" : "pipeline 0");
    const nlohmann::json identity = {{"model", captured() ? request_.captured_graph.name : request_.model.name},
                                     {"schedule", schedule.name},
                                     {"seed", request_.training.seed},
                                     {"devices", devices},
                                     {"replicas", replicas},
                                     {"microbatches", m},
                                     {"dtype", request_.training.dtype}};
    int first_step = 0;
    if (request_.resume) first_step = resume(executor, identity);

    RunOutcome outcome;
    nlohmann::json& j = outcome.json;
    j["schedule"] = schedule.name;
    j["ranks"] = world_.world_size();
    j["data_parallel"] = replicas;
    j["microbatches"] = m;
    j["stages"] = schedule.num_stages();
    j["data"] = captured() ? tensors_->description() : data_.description();
    j["first_step"] = first_step;
    j["steps"] = nlohmann::json::array();
    // A captured model counts samples: its inputs need not be token sequences.
    const double tokens_per_step = double(m) * replicas * plan.microbatch_size * plan.seq_len;
    StepReport last;
    std::vector<MeasuredStep> timed;  // replica 0's traces of the steps after the timing warm-up
    const int timed_from = first_step + timing_warmup(request_.training.steps - first_step);
    for (int step = first_step; step < request_.training.steps; ++step) {
      const double rate = lr_ ? learning_rate(*lr_, step) : -1;
      last = executor.run_step(step,
                               captured() ? tensors_->batch(step, replica * m, m, m * replicas)
                                          : data_.batch(step, replica * m, m, plan.microbatch_size, plan.seq_len),
                               rate);
      std::vector<double> seconds, peak, overhead;
      collective(step, "gathering every rank's time and memory of the step", [&] {
        seconds = gather(world_, last.seconds, timeout_);
        peak = gather(world_, double(last.peak_saved_bytes), timeout_);
        overhead = gather(world_, last.overhead_ns / 1e3 / std::max<double>(1, double(last.actions)), timeout_);
      });
      const double step_seconds = *std::max_element(seconds.begin(), seconds.end());
      nlohmann::json entry = {{"step", step},
                              {"loss", last.loss},
                              {"seconds", step_seconds},
                              // A captured model's samples have no tokens (its seq_len is 1).
                              {captured() ? "samples_per_second" : "tokens_per_second", tokens_per_step / step_seconds},
                              {"peak_saved_bytes", peak},
                              {"overhead_us_per_action", overhead}};
      if (lr_) entry["learning_rate"] = rate;
      if (request_.training.max_grad_norm > 0) entry["grad_norm"] = last.grad_norm;
      // Every step's trace, outside its timing: the report is over many steps, not the last one.
      std::vector<MeasuredStep> traces;
      collective(step, "gathering every rank's trace of the step",
                 [&] { traces = split_by_replica(gather_all_traces(world_, last.trace, timeout_), devices); });
      entry["bubble"] = measured_result(executor.lowered(), traces[replica]).bubble_ratio;
      if (request_.progress && world_.rank() == 0) print_progress(entry, request_.training.steps);
      if (step >= timed_from || step + 1 == request_.training.steps) {
        // A run shorter than its warm-up is timed on its last step alone.
        if (step < timed_from) timed.clear();
        timed.push_back(std::move(traces[0]));
      }
      j["steps"].push_back(std::move(entry));
      // Every rank holds the same summed loss, so every rank stops at the same step. The parameters
      // this step produced are not finite: nothing of it is saved, and the last checkpoint stays the
      // one to resume from.
      if (!std::isfinite(last.loss) || (request_.training.max_grad_norm > 0 && !std::isfinite(last.grad_norm))) {
        outcome.diverged = true;
        j["diverged_at_step"] = step;
        if (world_.rank() == 0)
          fmt::print(stderr,
                     "error: step {}/{}: the loss is {}{}: training diverged and stops here, without saving this "
                     "step (lower --lr, or clip gradients with --clip)\n",
                     step + 1, request_.training.steps, last.loss,
                     std::isfinite(last.grad_norm) ? "" : fmt::format(", the gradient norm {}", last.grad_norm));
        break;
      }
      if (!request_.checkpoint_dir.empty() &&
          ((request_.save_every > 0 && (step + 1) % request_.save_every == 0) || step + 1 == request_.training.steps))
        save(executor, identity, step + 1);
    }
    if (!timed.empty()) describe_timing(executor, run, plan, timed, j);
    if (!request_.export_weights.empty() && !outcome.diverged) export_weights(executor, schedule, replica);
    if (world_.rank() == 0 && !request_.curve_path.empty() && !j["steps"].empty()) {
      std::vector<double> losses;
      for (const auto& entry : j["steps"])
        if (std::isfinite(entry["loss"].get<double>())) losses.push_back(entry["loss"].get<double>());
      const std::string data = request_.training.data.empty()
                                   ? std::string("synthetic data")
                                   : std::filesystem::path(request_.training.data).filename().string();
      const std::string title = fmt::format("{} with {} on {} devices, {}", identity["model"].get<std::string>(),
                                            schedule.name, schedule.num_devices, data);
      const std::string axis = captured() ? fmt::format("loss ({})", manifest_->loss.kind)
                                          : std::string("loss (mean next-token cross-entropy)");
      write_text_file(output_path(request_.curve_path, schedule.name),
                      render_curve_svg(title, axis, losses, first_step));
    }
    if (request_.verify && !outcome.diverged) outcome.verified = verify(plan, executor, schedule, j);
    return outcome;
  }

 private:
  bool captured() const { return !request_.export_dir.empty(); }

  // The trained parameters and buffers of every chunk, by the original model's state_dict names, in
  // one file rank 0 writes with torch::pickle_save (torch.load reads it into a dict for
  // load_state_dict). Every rank adds what it holds of replica 0's pipeline into one buffer of all
  // of them, summed over the job: the others add zeros, so the values arrive exactly.
  void export_weights(Executor& executor, const Schedule& schedule, int replica) {
    struct Entry {
      std::vector<std::string> names;
      at::Tensor value;  // where this rank holds it
      std::vector<int64_t> shape;
      at::ScalarType dtype;
      int64_t offset = 0;
    };
    std::vector<Entry> entries;
    std::map<std::string, size_t> by_state_name;
    int64_t total = 0;
    for (const ChunkSpec& chunk : manifest_->chunks) {
      auto add = [&](const std::vector<TensorSpec>& specs, const std::vector<std::vector<std::string>>& names) {
        for (size_t i = 0; i < specs.size(); ++i) {
          if (names[i].empty() || by_state_name.count(names[i][0])) continue;
          by_state_name[names[i][0]] = entries.size();
          entries.push_back({names[i], at::Tensor(), specs[i].shape, scalar_type(specs[i].dtype), total});
          total += c10::multiply_integers(specs[i].shape);
        }
      };
      add(chunk.parameters, chunk.parameter_state_names);
      add(chunk.buffers, chunk.buffer_state_names);
    }
    at::Tensor flat = at::zeros({total}, at::TensorOptions().dtype(at::kDouble));
    for (const auto& [name, tensor] : executor.state()) {
      // "stage{S}.{name}" or "stage{S}.buffer.{name}"; pipeline 0 of replica 0 contributes.
      const size_t dot = name.find('.');
      const int stage = std::stoi(name.substr(5, dot - 5));
      if (replica != 0 || stage >= schedule.stages_per_pipeline) continue;
      std::string key = name.substr(dot + 1);
      if (key.starts_with("buffer.")) key = key.substr(7);
      if (key.starts_with("adam_")) continue;
      for (size_t k = 0; k < manifest_->chunks.size(); ++k) {
        const ChunkSpec& chunk = manifest_->chunks[k];
        auto match = [&](const std::vector<TensorSpec>& specs, const std::vector<std::vector<std::string>>& names) {
          for (size_t i = 0; i < specs.size(); ++i)
            if (specs[i].name == key && !names[i].empty()) {
              // A weight tied across chunks is added once, by its first chunk's holder.
              if (&specs == &chunk.parameters &&
                  first_holder(chunk, static_cast<int>(k), static_cast<int>(i)) != int(k))
                return true;
              Entry& e = entries[by_state_name.at(names[i][0])];
              flat.narrow(0, e.offset, tensor.numel()).copy_(tensor.detach().reshape({-1}));
              return true;
            }
          return false;
        };
        if (chunk.file == manifest_->chunks[schedule.chunk_of_stage(stage)].file &&
            (match(chunk.parameters, chunk.parameter_state_names) || match(chunk.buffers, chunk.buffer_state_names)))
          break;
      }
    }
    collective(request_.training.steps - 1, "gathering the trained weights",
               [&] { world_.all_reduce_sum(flat, timeout_); });
    if (world_.rank() != 0) return;
    c10::Dict<std::string, at::Tensor> weights;
    for (const Entry& e : entries) {
      const at::Tensor value = flat.narrow(0, e.offset, c10::multiply_integers(e.shape)).reshape(e.shape).to(e.dtype);
      for (const std::string& n : e.names) weights.insert(n, value);
    }
    const std::vector<char> bytes = torch::pickle_save(c10::IValue(weights));
    write_text_file(request_.export_weights, std::string(bytes.begin(), bytes.end()));
    if (!request_.json)
      fmt::print("weights: {} tensors by their state_dict names in {} (torch.load, then model.load_state_dict)\n",
                 weights.size(), request_.export_weights);
  }

  // Runs bookkeeping collectives; a peer that fails them is reported with the rank, the step and what
  // was being gathered, as the executor reports its own.
  void collective(int step, std::string_view what, const std::function<void()>& body) {
    try {
      body();
    } catch (const TransportError& e) {
      throw PeerFailure(fmt::format("rank {}: step {}: {}: {}", world_.rank(), step, what, e.what()));
    }
  }

  // The job's traces as one step of each pipeline replica (global rank = replica * devices + device).
  static std::vector<MeasuredStep> split_by_replica(std::vector<std::vector<MeasuredAction>> all, int devices) {
    std::vector<MeasuredStep> replicas(all.size() / devices);
    for (size_t r = 0; r < replicas.size(); ++r)
      replicas[r].assign(std::make_move_iterator(all.begin() + r * devices),
                         std::make_move_iterator(all.begin() + (r + 1) * devices));
    return replicas;
  }

  // More computing threads on this machine than it has cores: ranks wait for a core, which the
  // simulation (a device per rank, each with its own) does not model.
  std::string core_sharing_note() const {
    const unsigned cores = std::thread::hardware_concurrency();
    const int threads = at::get_num_threads(), ranks = request_.env.local_world_size;
    if (cores == 0 || static_cast<int64_t>(ranks) * threads <= static_cast<int64_t>(cores)) return "";
    return fmt::format(
        "{} ranks of {} thread{} share this machine's {} cores: they wait for a core, which the simulation (each "
        "rank a device of its own) does not model; expect the measured step to be longer than predicted",
        ranks, threads, threads == 1 ? "" : "s", cores);
  }

  int timing_warmup(int steps_run) const {
    if (request_.timing_warmup >= 0) return request_.timing_warmup;
    return steps_run >= 2 ? std::max(1, steps_run / 5) : 0;
  }

  // The timing report over the timed steps (docs/fidelity.md): the measured step's median and
  // spread, the simulator's step from the mean action times, and per rank where the time went in
  // both. The timelines drawn are the last step's.
  void describe_timing(Executor& executor, const ScheduledRun& run, const ModelPlan& plan,
                       const std::vector<MeasuredStep>& steps, nlohmann::json& j) {
    const Schedule& lowered = executor.lowered();
    const int devices = lowered.num_devices;
    std::vector<double> makespans, bubbles;
    std::vector<std::vector<TimeBreakdown>> parts(devices);
    for (const MeasuredStep& step : steps) {
      const SimResult r = measured_result(lowered, step);
      makespans.push_back(r.makespan);
      bubbles.push_back(r.bubble_ratio);
      const std::vector<TimeBreakdown> breakdown = measured_breakdown(lowered, step);
      for (int d = 0; d < devices; ++d) parts[d].push_back(breakdown[d]);
    }
    SimResult measured = measured_result(lowered, steps.back());
    const Schedule timed = with_measured_custom_durations(lowered, steps);
    const CostTable costs = measured_costs(lowered, steps);
    const SimResult predicted = simulate(timed, costs, {true, false});
    // The views report efficiency against the lower bound of the same measured costs.
    measured.lower_bound = lower_bound(timed, costs);
    measured.efficiency = measured.makespan > 0 ? measured.lower_bound / measured.makespan : 0;
    const double median_makespan = median(makespans);
    const int first_timed = j["steps"].back()["step"].get<int>() + 1 - static_cast<int>(steps.size());
    j["timed_steps"] = {{"first", first_timed}, {"count", steps.size()}};
    j["measured_makespan_ms"] = median_makespan;
    j["measured_makespan_spread_ms"] = {{"min", quantile(makespans, 0)},
                                        {"p25", quantile(makespans, 0.25)},
                                        {"p75", quantile(makespans, 0.75)},
                                        {"max", quantile(makespans, 1)}};
    j["predicted_makespan_ms"] = predicted.makespan;
    j["gap_percent"] = median_makespan > 0 ? 100 * (median_makespan - predicted.makespan) / median_makespan : 0.0;
    j["measured_bubble_ratio"] = median(bubbles);
    j["predicted_bubble_ratio"] = predicted.bubble_ratio;
    j["measured_link_ms"] = {{"latency", costs.link.latency},
                             {"send_cpu", costs.link.send_cpu},
                             {"receive_cpu", costs.link.receive_cpu},
                             {"rendezvous", costs.link.rendezvous}};
    const std::vector<TimeBreakdown> simulated = simulated_breakdown(timed, predicted);
    j["breakdown_ms"] = nlohmann::json::array();
    for (int d = 0; d < devices; ++d) {
      auto component = [&](double TimeBreakdown::*field) {
        std::vector<double> values;
        for (const TimeBreakdown& p : parts[d]) values.push_back(p.*field);
        return median(values);
      };
      j["breakdown_ms"].push_back({{"rank", d},
                                   {"measured",
                                    {{"compute", component(&TimeBreakdown::compute)},
                                     {"transfer", component(&TimeBreakdown::transfer)},
                                     {"waiting", component(&TimeBreakdown::waiting)},
                                     {"overhead", component(&TimeBreakdown::overhead)}}},
                                   {"simulated",
                                    {{"compute", simulated[d].compute},
                                     {"transfer", simulated[d].transfer},
                                     {"waiting", simulated[d].waiting},
                                     {"overhead", simulated[d].overhead}}}});
    }
    if (const std::string note = core_sharing_note(); !note.empty()) j["prediction_note"] = note;
    // Memory: the simulator's activation peak per device from the cost graph's per-operator saved
    // bytes, next to the peak the executor held. The actions take their measured times, so that what
    // is saved and freed happens in the order the ranks ran it (a captured graph without timings
    // would otherwise put every action at time 0, where frees come first and no peak is seen).
    const StageAggregate aggregate = aggregate_stages(plan.graph, run.partition, aggregation_options(plan));
    CostTable held = aggregate.table;
    for (size_t k = 0; k < held.stages.size(); ++k) {
      StageCosts& s = held.stages[k];
      const StageCosts& t = costs.stages[k];
      s.forward = t.forward, s.backward_input = t.backward_input, s.backward_weight = t.backward_weight;
      s.backward = t.backward, s.recompute = t.recompute, s.optimizer = t.optimizer;
      // A captured model's pieces that train keep their graphs, checkpoints included, from I to W.
      s.checkpoint_until_weight = plan.scripted != nullptr;
    }
    held.link = costs.link, held.host_link = costs.host_link, held.pairs.clear();
    const SimResult modelled = simulate(timed, held, {false, true});
    nlohmann::json memory = nlohmann::json::array();
    const std::vector<double> peaks = j["steps"].back()["peak_saved_bytes"].get<std::vector<double>>();
    for (int d = 0; d < devices; ++d)
      memory.push_back(
          {{"rank", d},
           {"measured_peak_saved_bytes", peaks[d]},
           {"simulated_peak_activation_bytes", modelled.devices[d].peak_memory - modelled.devices[d].static_memory}});
    j["memory"] = memory;
    if (world_.rank() == 0) {
      if (!request_.trace_path.empty())
        write_text_file(output_path(request_.trace_path, lowered.name), render_trace(lowered, measured, "ms"));
      if (!request_.svg_path.empty()) {
        const std::string path = output_path(request_.svg_path, lowered.name);
        // Measured steps hold actions far shorter than the rest (sends, the optimizer): the aspect is
        // capped so that the picture stays a timeline rather than a strip.
        const TimelineStyle style{"ms", kMeasuredTimelineAspect};
        write_text_file(path, render_svg(lowered, measured, style));
        // The simulator's timeline for the same measured action times, next to it.
        write_text_file(with_suffix(path, ".simulated"), render_svg(timed, predicted, style));
      }
    }
  }

  AggregationOptions aggregation_options(const ModelPlan& plan) const {
    AggregationOptions o;
    o.shape = plan.graph.reference;
    o.decisions = request_.memory_decisions;
    o.offload_checkpoints = request_.offload_checkpoints;
    o.parameter_bytes = o.gradient_bytes = plan.dtype == at::kDouble ? 8 : 4;
    o.optimizer_bytes = optimizer_.kind == "adamw" ? 2 * o.parameter_bytes : 0;
    return o;
  }

  int resume(Executor& executor, const nlohmann::json& identity) {
    const std::string& dir = request_.checkpoint_dir;
    const int step = latest_checkpoint(dir);
    if (step < 0)
      throw Error(fmt::format("--resume: {} holds no complete checkpoint ({}/latest is missing)", dir, dir));
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

  void save(Executor& executor, const nlohmann::json& identity, int next_step) {
    RankCheckpoint checkpoint;
    checkpoint.step = next_step;
    checkpoint.optimizer_steps = executor.optimizer_steps();
    checkpoint.identity = identity;
    checkpoint.tensors = executor.state();
    write_rank_checkpoint(checkpoint_path(request_.checkpoint_dir, next_step, world_.rank()), checkpoint);
    // Only once every rank's file is in place does `latest` move.
    collective(next_step - 1, "waiting for every rank to write its checkpoint", [&] { world_.barrier(timeout_); });
    if (world_.rank() == 0) mark_latest_checkpoint(request_.checkpoint_dir, next_step);
    collective(next_step - 1, "waiting for rank 0 to mark the checkpoint the latest",
               [&] { world_.barrier(timeout_); });
    if (world_.rank() == 0 && !request_.json)
      fmt::print("checkpoint: step {} saved in {}\n", next_step,
                 std::filesystem::path(checkpoint_path(request_.checkpoint_dir, next_step, 0)).parent_path().string());
  }

  static void print_progress(const nlohmann::json& e, int steps) {
    const bool samples = e.contains("samples_per_second");
    fmt::print("step {:>4}/{}  loss {:.4f}  {:>9.0f} {}/s  {:7.1f} ms  bubble {:4.1f}%", e["step"].get<int>() + 1,
               steps, e["loss"].get<double>(), e[samples ? "samples_per_second" : "tokens_per_second"].get<double>(),
               samples ? "samples" : "tokens", 1e3 * e["seconds"].get<double>(), 100 * e["bubble"].get<double>());
    if (e.contains("learning_rate")) fmt::print("  lr {:.2e}", e["learning_rate"].get<double>());
    if (e.contains("grad_norm")) fmt::print("  grad norm {:.3f}", e["grad_norm"].get<double>());
    fmt::print("\n");
    std::fflush(stdout);
  }

  // With several schedules in one run, each file gets the schedule's name before its extension.
  std::string output_path(const std::string& path, const std::string& schedule) const {
    return request_.runs.size() == 1 ? path : with_suffix(path, "." + schedule);
  }

  // "dir/name.svg" + ".x" -> "dir/name.x.svg".
  static std::string with_suffix(const std::string& path, const std::string& suffix) {
    const size_t dot = path.find_last_of('.');
    const size_t slash = path.find_last_of('/');
    if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return path + suffix;
    return path.substr(0, dot) + suffix + path.substr(dot);
  }

  ReferenceTraining reference_training(int microbatches) const {
    ReferenceTraining training;
    training.microbatches = microbatches;
    training.steps = request_.training.steps;
    training.optimizer = optimizer_;
    training.learning_rate = lr_;
    training.max_grad_norm = request_.training.max_grad_norm;
    return training;
  }

  const ReferenceRun& reference(const ModelPlan& plan, int microbatches) {
    auto it = references_.find(microbatches);
    if (it == references_.end())
      it = references_.emplace(microbatches, train_reference(plan, data_, reference_training(microbatches))).first;
    return it->second;
  }

  // A captured model's single-process run (scripted_reference.h), once per micro-batch count.
  const ScriptedReferenceRun& scripted_reference(const ModelPlan& plan, int microbatches) {
    auto it = scripted_references_.find(microbatches);
    if (it == scripted_references_.end())
      it = scripted_references_
               .emplace(microbatches, train_scripted_reference(*plan.scripted, *tensors_,
                                                               reference_training(microbatches), plan.seed))
               .first;
    return it->second;
  }

  bool verify(const ModelPlan& plan, Executor& executor, const Schedule& schedule, nlohmann::json& j) {
    const int microbatches = schedule.num_microbatches * request_.data_parallel;
    const std::vector<double>& losses =
        captured() ? scripted_reference(plan, microbatches).losses : reference(plan, microbatches).losses;
    double loss_difference = 0;
    for (const auto& entry : j["steps"]) {
      const double got = entry["loss"].get<double>(), want = losses[entry["step"].get<int>()];
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
    collective(request_.training.steps - 1, "comparing the parameters with the single-process run",
               [&] { per_rank = gather(world_, worst, timeout_); });
    const double parameter_difference = *std::max_element(per_rank.begin(), per_rank.end());
    const bool passed = loss_difference <= request_.tolerance && parameter_difference <= request_.tolerance;
    if (worst > request_.tolerance)
      fmt::print(stderr, "rank {}: {}: parameter {} differs from the single-process run by {:.3g} (relative)\n",
                 world_.rank(), schedule.name, worst_name, worst);
    j["verify"] = {{"loss_difference", loss_difference},
                   {"parameter_difference", parameter_difference},
                   {"tensors_compared_on_rank_0", compared},
                   {"tolerance", request_.tolerance},
                   {"passed", passed}};
    return passed;
  }

  const RunRequest& request_;
  Transport& world_;
  c10::Device device_;
  Milliseconds timeout_;
  OptimizerConfig optimizer_;
  at::ScalarType dtype_ = at::kFloat;
  DataSource data_ = DataSource::synthetic(2, 0);
  std::optional<ExportManifest> manifest_;  // a captured model's
  std::optional<TensorData> tensors_;
  std::optional<LrSchedule> lr_;
  std::map<int, ReferenceRun> references_;
  std::map<int, ScriptedReferenceRun> scripted_references_;
};

void print_text(const nlohmann::json& run, bool progress) {
  fmt::print("{}: {} ranks ({} data-parallel), {} stages, {} micro-batches, data: {}\n",
             run["schedule"].get<std::string>(), run["ranks"].get<int>(), run["data_parallel"].get<int>(),
             run["stages"].get<int>(), run["microbatches"].get<int>(), run["data"].get<std::string>());
  // Counted from 1, as train's progress lines and checkpoints count them (the JSON's "step" is the index).
  if (!progress)
    for (const auto& s : run["steps"])
      fmt::print("  step {}: loss {:.6f}  {:.1f} ms\n", s["step"].get<int>() + 1, s["loss"].get<double>(),
                 1e3 * s["seconds"].get<double>());
  if (!run.contains("timed_steps")) return;
  const int first = run["timed_steps"]["first"].get<int>(), count = run["timed_steps"]["count"].get<int>();
  const auto& spread = run["measured_makespan_spread_ms"];
  fmt::print(
      "  steps {}-{} ({} timed): measured {:.2f} ms median (quartiles {:.2f}-{:.2f}, bubble {:.1f}%), simulated "
      "from the mean action times {:.2f} ms (bubble {:.1f}%): {:.1f}% {}\n",
      first + 1, first + count, count, run["measured_makespan_ms"].get<double>(), spread["p25"].get<double>(),
      spread["p75"].get<double>(), 100 * run["measured_bubble_ratio"].get<double>(),
      run["predicted_makespan_ms"].get<double>(), 100 * run["predicted_bubble_ratio"].get<double>(),
      std::abs(run["gap_percent"].get<double>()),
      run["gap_percent"].get<double>() >= 0 ? "below the measurement" : "above the measurement");
  fmt::print("  {:<8} {:>28} | {:>28}\n", "ms", "measured (median)", "simulated");
  fmt::print("  {:<8} {:>9}{:>10}{:>9}{:>10} | {:>9}{:>10}{:>9}\n", "", "compute", "transfer", "waiting", "overhead",
             "compute", "transfer", "waiting");
  for (const auto& b : run["breakdown_ms"]) {
    const auto &m = b["measured"], &p = b["simulated"];
    fmt::print("  rank {:<3} {:>9.2f}{:>10.2f}{:>9.2f}{:>10.2f} | {:>9.2f}{:>10.2f}{:>9.2f}\n", b["rank"].get<int>(),
               m["compute"].get<double>(), m["transfer"].get<double>(), m["waiting"].get<double>(),
               m["overhead"].get<double>(), p["compute"].get<double>(), p["transfer"].get<double>(),
               p["waiting"].get<double>());
  }
  if (run.contains("prediction_note")) fmt::print("  note: {}\n", run["prediction_note"].get<std::string>());
  for (const auto& m : run["memory"])
    fmt::print("  rank {}: peak saved activations {} measured, {} simulated from the cost graph\n",
               m["rank"].get<int>(), format_bytes(m["measured_peak_saved_bytes"].get<double>()),
               format_bytes(m["simulated_peak_activation_bytes"].get<double>()));
  if (run.contains("verify")) {
    const auto& v = run["verify"];
    fmt::print("  verify: loss {:.3g}, parameters {:.3g} relative to the single-process run (tolerance {:.3g}): {}\n",
               v["loss_difference"].get<double>(), v["parameter_difference"].get<double>(),
               v["tolerance"].get<double>(), v["passed"].get<bool>() ? "exact" : "MISMATCH");
  }
}

int run_rank(const RunRequest& request) {
  HookRegistry hooks;
  for (const auto& [name, spec] : request.hooks) hooks.add(name, builtin_hook(spec));
  const Milliseconds timeout(static_cast<int64_t>(request.timeout_seconds * 1000));
  const TransportBackend& backend = transport_backend(transport_for(request.env));
  const std::unique_ptr<Transport> transport = backend.connect(request.env, timeout);
  // The backend's threads, started by now, read and write the messages; when ranks share cores, a
  // message should not wait for a core behind a computation (docs/runtime.md).
  if (backend.own_threads) lower_compute_priority();
  RankJob job(request, *transport);
  nlohmann::json runs = nlohmann::json::array();
  bool all_verified = true, any_diverged = false;
  for (const ScheduledRun& run : request.runs) {
    RunOutcome outcome = job.train(run, hooks);
    all_verified = all_verified && outcome.verified;
    any_diverged = any_diverged || outcome.diverged;
    if (transport->rank() == 0) {
      if (!request.json) print_text(outcome.json, request.progress);
      std::fflush(stdout);
    }
    runs.push_back(std::move(outcome.json));
  }
  if (transport->rank() == 0 && request.json) fmt::print("{}\n", nlohmann::json{{"runs", runs}}.dump(2));
  return all_verified && !any_diverged ? kExitSuccess : kExitProblemsFound;
}

}  // namespace

}  // namespace flexpipe::runtime

extern "C" int flexpipe_runtime_main(const flexpipe::runtime::RunRequest* request) {
  using namespace flexpipe::runtime;
  int code = flexpipe::kExitSuccess;
  keep_freed_host_memory();
  try {
    training_device(request->device, request->env);  // fails before any rank connects
    code = run_rank(*request);
  } catch (const PeerFailure& e) {
    code = flexpipe::report_error(flexpipe::kExitFailure, e.what());  // its message names the rank already
  } catch (const TransportError& e) {
    code = flexpipe::report_error(flexpipe::kExitFailure, fmt::format("rank {}: {}", request->env.rank, e.what()));
  } catch (const std::exception& e) {
    code = flexpipe::report_exception(e, fmt::format("rank {}: ", request->env.rank));
  }
  std::fflush(stdout);
  std::fflush(stderr);
  // After a failure, c10d's destructors may wait for peers that are gone: leave without them.
  if (code != flexpipe::kExitSuccess) std::_Exit(code);
  return code;
}

extern "C" int flexpipe_runtime_check(const flexpipe::runtime::RunRequest* request) {
  using namespace flexpipe::runtime;
  try {
    training_device(request->device, request->env);
    if (request->export_dir.empty()) return flexpipe::kExitSuccess;
    const at::ScalarType dtype = request->training.dtype == "float64" ? at::kDouble : at::kFloat;
    for (const ScheduledRun& run : request->runs) {
      const ModelPlan plan = make_scripted_plan(request->captured_graph, run.partition, request->export_dir, dtype,
                                                request->training.seed);
      for (int k = 0; k < plan.num_chunks(); ++k) load_scripted_chunk(*plan.scripted, k);
      if (!request->training.data.empty()) TensorData::from_file(request->training.data, *plan.scripted);
    }
  } catch (const std::exception& e) {
    return flexpipe::report_exception(e, "");
  }
  return flexpipe::kExitSuccess;
}
