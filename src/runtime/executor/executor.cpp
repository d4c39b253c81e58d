// The executor's dispatch and step loop: builds the rank's stages, runs a step's actions in order, finishes the step.
#include "executor/executor.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <map>
#include <thread>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "executor/executor_state.h"
#include "flexpipe/ir/lowering.h"
#include "flexpipe/support/error.h"
#include "scripted_model/generator_relay.h"

namespace flexpipe::runtime {

Executor::State::State(const Schedule& s, const ModelPlan& p, Transport& t, const HookRegistry& registry,
                       ExecutorOptions o)
    : schedule(lower(s)), plan(p), transport(t), options(std::move(o)) {
  rank = transport.rank();
  me = transport.global_rank(rank);
  microbatches = schedule.num_microbatches;
  if (options.replicas < 1 || options.replica < 0 || options.replica >= options.replicas ||
      (options.replicas > 1 && options.world == nullptr))
    throw Error(fmt::format("data parallelism: replica {} of {} needs the job-wide transport", options.replica,
                            options.replicas));
  if (transport.world_size() != schedule.num_devices)
    throw Error(fmt::format("schedule {} runs on {} devices but the job has {} ranks", schedule.name,
                            schedule.num_devices, transport.world_size()));
  if (plan.num_chunks() != schedule.stages_per_pipeline)
    throw Error(fmt::format("schedule {} has {} stages per pipeline but the model is cut into {} chunks", schedule.name,
                            schedule.stages_per_pipeline, plan.num_chunks()));
  for (const CustomOpKind& op : schedule.custom_ops) {
    const Hook* hook = registry.find(op.name);
    if (hook == nullptr) {
      std::string known;
      for (const std::string& n : registry.names()) known += (known.empty() ? "" : ", ") + n;
      throw Error(
          fmt::format("schedule {} uses operation {} but no hook is registered for it (registered: {}); "
                      "map it with --hook {}=noop|log|sleep:MS",
                      schedule.name, op.name, known.empty() ? "none" : known, op.name));
    }
    hooks.push_back(hook);
  }
  if (plan.scripted) {
    build_scripted_stages();
    return;
  }
  const int nodes = static_cast<int>(plan.graph.nodes.size());
  const std::vector<MemoryDecision>& decisions = options.memory_decisions;
  if (!decisions.empty() && static_cast<int>(decisions.size()) != nodes)
    throw Error(fmt::format("{} memory decisions for the {} operators of the model (one per graph node, or none)",
                            decisions.size(), nodes));
  if (!options.offload_checkpoints.empty() && static_cast<int>(options.offload_checkpoints.size()) != plan.num_chunks())
    throw Error(fmt::format("{} checkpoint offload flags for the {} model chunks (one per chunk, or none)",
                            options.offload_checkpoints.size(), plan.num_chunks()));
  for (int k = 0; k < plan.num_chunks(); ++k) {
    crossing_index.emplace_back(nodes, -1);
    crossing_shapes.emplace_back();
    for (size_t i = 0; i < plan.crossing[k].size(); ++i) {
      crossing_index[k][plan.crossing[k][i]] = static_cast<int>(i);
      crossing_shapes[k].push_back(output_shape(plan, plan.crossing[k][i]));
    }
  }
  local_of_stage.assign(schedule.num_stages(), -1);
  const std::vector<char> split_stages = split_backward_stages(schedule);
  // Without decisions R reruns every operator, one layer at a time.
  const std::vector<int> segments =
      recompute_segments(plan.graph, plan.partition,
                         decisions.empty() ? std::vector<MemoryDecision>(nodes, MemoryDecision::Recompute) : decisions);
  for (int s = 0; s < schedule.num_stages(); ++s) {
    if (schedule.stage_device[s] != rank) continue;
    local_of_stage[s] = static_cast<int>(locals.size());
    Local local = new_local(s, split_stages[s]);
    local.module = make_chunk_module(plan, local.chunk);
    for (auto& op : local.module.operators) op->place(options.device);
    std::vector<at::Tensor> params;
    for (auto& op : local.module.operators)
      for (at::Tensor& p : op->parameters()) params.push_back(p);
    local.optimizer = std::make_unique<Optimizer>(options.optimizer, params);
    for (int v = local.module.begin; v < local.module.end; ++v) {
      local.recomputed_op.push_back(decisions.empty() || decisions[v] == MemoryDecision::Recompute);
      local.offloaded_op.push_back(decisions.empty() || decisions[v] == MemoryDecision::Offload);
      local.segment_of.push_back(segments[v] < 0 ? -1 : segments[v] - local.module.begin);
    }
    locals.push_back(std::move(local));
  }
  mark_recomputed_and_stepped();
}

// A stage this rank holds, with its per-micro-batch slots; the chunk's compute is set by the caller.
Executor::State::Local Executor::State::new_local(int stage, bool split_backward) const {
  Local local;
  local.stage = stage;
  local.split_backward = split_backward;
  local.chunk = schedule.chunk_of_stage(stage);
  local.offload_checkpoints = !options.offload_checkpoints.empty() && options.offload_checkpoints[local.chunk];
  for (int pipeline = 0; pipeline < schedule.num_pipelines; ++pipeline)
    local.replicas.push_back(pipeline * schedule.stages_per_pipeline + local.chunk);
  local.recompute.assign(microbatches, 0);
  local.micro.resize(microbatches);
  local.recv_forward.resize(microbatches);
  local.recv_backward.resize(microbatches);
  return local;
}

void Executor::State::mark_recomputed_and_stepped() {
  for (const Action& a : schedule.device_actions[rank]) {
    if (a.kind == ActionKind::R) locals[local_of_stage[a.stage]].recompute[a.microbatch] = 1;
    if (a.kind == ActionKind::Opt) locals[local_of_stage[a.stage]].has_opt_action = true;
  }
}

// A captured model: what crosses each cut is the manifest's, the chunks are its modules, and what R
// and OFFLOAD act on are its pieces (docs/export.md), not per-operator decisions.
void Executor::State::build_scripted_stages() {
  const ExportManifest& manifest = *plan.scripted;
  for (int k = 0; k < plan.num_chunks(); ++k) {
    crossing_shapes.emplace_back();
    if (k > 0)
      for (const TensorSpec& t : manifest.chunks[k].inputs) crossing_shapes[k].push_back(t.shape);
  }
  if (draws_random(manifest)) relayed_generator_shape = generator_state_shape(plan.dtype, options.device);
  local_of_stage.assign(schedule.num_stages(), -1);
  const std::vector<char> split_stages = split_backward_stages(schedule);
  for (int s = 0; s < schedule.num_stages(); ++s) {
    if (schedule.stage_device[s] != rank) continue;
    local_of_stage[s] = static_cast<int>(locals.size());
    Local local = new_local(s, split_stages[s]);
    local.scripted = std::make_unique<ScriptedChunk>(load_scripted_chunk(manifest, local.chunk, options.device));
    local.optimizer = std::make_unique<Optimizer>(options.optimizer, local.scripted->parameters);
    locals.push_back(std::move(local));
  }
  std::map<std::string, TiedWeight> by_name;
  for (int s = 0; s < schedule.num_stages(); ++s) {
    const ChunkSpec& chunk = manifest.chunks[schedule.chunk_of_stage(s)];
    int trainable = 0;
    for (size_t j = 0; j < chunk.parameters.size(); ++j) {
      if (!chunk.parameters[j].requires_grad) continue;
      if (!chunk.parameter_tied_chunks[j].empty()) {
        TiedWeight& w = by_name[chunk.parameter_state_names[j].front()];
        w.name = chunk.parameter_state_names[j].front();
        w.copies.emplace_back(s, trainable);
      }
      ++trainable;
    }
  }
  for (auto& [name, weight] : by_name) tied.push_back(std::move(weight));
  mark_recomputed_and_stepped();
}

std::string Executor::State::where(const Action& a) const {
  return fmt::format("rank {}: step {}, action {} ({})", me, step, action_index, schedule.action_name(a));
}

void Executor::State::optimizer_step(Local& l) {
  const std::vector<at::Tensor> grads = gradients_of(l);
  ComputeTimer timer{compute_ns};
  l.optimizer->step(grads);
  l.stepped = true;
}

void Executor::State::custom(const Action& a) {
  const CustomOpKind& op = schedule.custom_ops[a.custom];
  (*hooks[a.custom])(HookContext{op.name, rank, step, a.stage, a.microbatch});
}

void Executor::State::inject_fault() {
  const FaultInjection& f = options.fault;
  if (f.rank != rank || f.step != step || f.action != action_index) return;
  std::fflush(stdout);
  std::fflush(stderr);
  if (!f.hang) std::raise(SIGKILL);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void Executor::State::execute(const Action& a) {
  switch (a.kind) {
    case ActionKind::F: forward(a, a.stage, a.microbatch); break;
    case ActionKind::B: backward(a, a.stage, a.microbatch, false); break;
    case ActionKind::I: backward(a, a.stage, a.microbatch, true); break;
    case ActionKind::W: weight(a, a.stage, a.microbatch); break;
    case ActionKind::R: recompute(a, a.stage, a.microbatch); break;
    case ActionKind::Overlap:
      // Run one after the other: on a CPU there is no second stream to overlap them on.
      forward(a, a.stage, a.microbatch);
      backward(a, a.stage2, a.microbatch2, a.sub_kind == ActionKind::I);
      break;
    case ActionKind::SendF: {
      const int next = schedule.next_stage(a.stage);
      post_send(pack(local(a.stage).micro[a.microbatch].outputs), schedule.stage_device[next],
                forward_tag(next, a.microbatch), a);
      local(a.stage).micro[a.microbatch].outputs.clear();
      break;
    }
    case ActionKind::RecvF: {
      const int prev = schedule.prev_stage(a.stage);
      local(a.stage).recv_forward[a.microbatch] =
          post_recv(forward_shapes(local(a.stage).chunk), schedule.stage_device[prev],
                    forward_tag(a.stage, a.microbatch), a);
      break;
    }
    case ActionKind::SendB: {
      const int prev = schedule.prev_stage(a.stage);
      post_send(pack(local(a.stage).micro[a.microbatch].input_grads), schedule.stage_device[prev],
                backward_tag(a.stage, a.microbatch), a);
      local(a.stage).micro[a.microbatch].input_grads.clear();
      break;
    }
    case ActionKind::RecvB: {
      const int next = schedule.next_stage(a.stage);
      local(a.stage).recv_backward[a.microbatch] =
          post_recv(crossing_shapes[local(a.stage).chunk + 1], schedule.stage_device[next],
                    backward_tag(next, a.microbatch), a);
      break;
    }
    case ActionKind::Offload: transfer_saved(a, a.stage, a.microbatch, true); break;
    case ActionKind::Reload: transfer_saved(a, a.stage, a.microbatch, false); break;
    case ActionKind::Opt: {
      Local& l = local(a.stage);
      // Gradients summed over copies (DualPipe's, data parallelism's) or clipped by the global norm
      // are final only at the end of the step; the stage steps then.
      if (steps_at_opt()) optimizer_step(l);
      break;
    }
    case ActionKind::Custom: custom(a); break;
  }
}

Executor::Executor(const Schedule& schedule, const ModelPlan& plan, Transport& transport, const HookRegistry& hooks,
                   ExecutorOptions options)
    : state_(std::make_unique<State>(schedule, plan, transport, hooks, std::move(options))) {}

Executor::~Executor() = default;

const Schedule& Executor::lowered() const { return state_->schedule; }

std::vector<int> Executor::local_stages() const {
  std::vector<int> stages;
  for (const auto& l : state_->locals) stages.push_back(l.stage);
  return stages;
}

std::vector<std::pair<int, std::vector<at::Tensor>>> Executor::stage_parameters(int stage) const {
  std::vector<std::pair<int, std::vector<at::Tensor>>> result;
  const auto& l = state_->locals[state_->local_of_stage[stage]];
  if (l.scripted) return result;
  for (int node = l.module.begin; node < l.module.end; ++node)
    result.emplace_back(node, l.module.operators[node - l.module.begin]->parameters());
  return result;
}

std::vector<std::pair<std::string, at::Tensor>> Executor::state() {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& l : state_->locals) {
    const std::string stage = fmt::format("stage{}", l.stage);
    if (l.scripted) {
      const ScriptedChunk& c = *l.scripted;
      for (size_t i = 0; i < c.parameters.size(); ++i)
        tensors.emplace_back(fmt::format("{}.{}", stage, c.parameter_names[i]), c.parameters[i]);
      // BatchNorm's running statistics: a resumed run must normalise as the uninterrupted one.
      for (size_t i = 0; i < c.buffers.size(); ++i)
        tensors.emplace_back(fmt::format("{}.buffer.{}", stage, c.buffer_names[i]), c.buffers[i]);
    }
    for (int node = l.module.begin; node < l.module.end; ++node) {
      auto& params = l.module.op(node).parameters();
      for (size_t i = 0; i < params.size(); ++i)
        tensors.emplace_back(fmt::format("{}.{}.{}", stage, state_->plan.graph.nodes[node].name, i), params[i]);
    }
    auto& m1 = l.optimizer->first_moments();
    auto& m2 = l.optimizer->second_moments();
    for (size_t i = 0; i < m1.size(); ++i) tensors.emplace_back(fmt::format("{}.adam_m.{}", stage, i), m1[i]);
    for (size_t i = 0; i < m2.size(); ++i) tensors.emplace_back(fmt::format("{}.adam_v.{}", stage, i), m2[i]);
  }
  return tensors;
}

int Executor::optimizer_steps() const {
  return state_->locals.empty() ? 0 : state_->locals.front().optimizer->steps_taken();
}

void Executor::load_state(const std::vector<std::pair<std::string, at::Tensor>>& saved, int optimizer_steps) {
  at::NoGradGuard no_grad;
  for (auto& [name, tensor] : state()) {
    auto it = std::find_if(saved.begin(), saved.end(), [&](const auto& e) { return e.first == name; });
    if (it == saved.end()) throw Error(fmt::format("the checkpoint has no tensor {}", name));
    if (!it->second.sizes().equals(tensor.sizes()))
      throw Error(fmt::format("checkpoint tensor {} has shape {} but the model needs {}", name,
                              fmt::join(it->second.sizes(), "x"), fmt::join(tensor.sizes(), "x")));
    tensor.copy_(it->second);
  }
  for (auto& l : state_->locals) l.optimizer->set_steps_taken(optimizer_steps);
}

StepReport Executor::run_step(int step, const std::vector<MicroBatchData>& batch, double learning_rate) {
  State& s = *state_;
  if (static_cast<int>(batch.size()) != s.microbatches)
    throw Error(
        fmt::format("step {}: {} micro-batches of data for a schedule of {}", step, batch.size(), s.microbatches));
  at::NoGradGuard no_grad;
  s.step = step;
  s.placed_batch = placed_on(batch, s.options.device);
  s.batch = &s.placed_batch;
  s.peak_saved = s.saved_bytes;
  s.peak_offloaded = s.offloaded_bytes;
  for (auto& l : s.locals) {
    l.stepped = false;
    if (learning_rate >= 0) l.optimizer->set_learning_rate(learning_rate);
  }
  StepReport report;
  try {
    s.transport.barrier(s.options.timeout);
  } catch (const std::exception& e) {
    throw PeerFailure(
        fmt::format("rank {}: step {}: waiting for every rank at the start of the step: {}", s.me, step, e.what()));
  }
  const Clock::time_point start = Clock::now();
  auto since_start = [&] { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(); };
  const auto& actions = s.schedule.device_actions[s.rank];
  if (s.options.record_trace) report.trace.reserve(actions.size());
  for (s.action_index = 0; s.action_index < static_cast<int>(actions.size()); ++s.action_index) {
    s.inject_fault();
    const int64_t begin = since_start();
    s.waited_ns = 0;
    s.compute_ns = 0;
    s.transfer_ns = 0;
    s.execute(actions[s.action_index]);
    {
      // A device queues kernels: the action ends when its work does, as the simulator's timeline has it.
      ComputeTimer timer{s.compute_ns};
      synchronize(s.options.device);
    }
    const int64_t end = since_start();
    report.overhead_ns += end - begin - s.waited_ns - s.compute_ns - s.transfer_ns;
    if (s.options.record_trace) report.trace.push_back({s.action_index, begin, end, s.waited_ns});
  }
  for (auto& p : s.sends)
    s.wait(*p.transfer,
           fmt::format("{}: send to rank {} did not complete", p.posted_by, s.transport.global_rank(p.peer)));
  report.actions = static_cast<int64_t>(actions.size());
  s.sends.clear();
  s.synchronise_replicas();
  s.synchronise_tied();
  s.synchronise_data_parallel();
  report.grad_norm = s.clip_gradients();
  double local_loss = 0;
  for (auto& l : s.locals) {
    if (!l.stepped) s.optimizer_step(l);
    if (l.chunk + 1 == s.plan.num_chunks())
      for (auto& m : l.micro) local_loss += m.loss / (double(s.microbatches) * s.options.replicas);
    for (int mb = 0; mb < s.microbatches; ++mb) {
      if (l.recv_forward[mb].transfer || l.recv_backward[mb].transfer)
        throw Error(fmt::format("rank {}: step {}: a receive of stage {} micro-batch {} was posted but never used",
                                s.me, step, l.stage, mb));
      l.micro[mb] = State::Micro{};
    }
  }
  s.saved_bytes = 0;
  s.offloaded_bytes = 0;
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  at::Tensor loss = at::full({1}, local_loss, at::TensorOptions().dtype(at::kDouble));
  try {
    s.transport.all_reduce_sum(loss, s.options.timeout);
  } catch (const std::exception& e) {
    throw PeerFailure(fmt::format("rank {}: step {}: summing the loss over all ranks: {}", s.me, step, e.what()));
  }
  report.loss = loss.item<double>();
  report.peak_saved_bytes = s.peak_saved;
  report.peak_offloaded_bytes = s.peak_offloaded;
  return report;
}

}  // namespace flexpipe::runtime
