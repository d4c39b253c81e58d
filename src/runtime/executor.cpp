#include "executor.h"

#include <cmath>
#include <csignal>
#include <cstdio>
#include <thread>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "flexpipe/support/error.h"
#include "flexpipe/ir/lowering.h"

namespace flexpipe::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// Adds the time of its scope to `total`: what the operators and the optimizer take, so that the
// executor's own overhead per action can be told apart from compute.
struct ComputeTimer {
  int64_t& total;
  Clock::time_point start = Clock::now();
  ~ComputeTimer() { total += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(); }
};

// Tags: one per (boundary, micro-batch, direction); gradient exchanges between copies of a stage above
// kReplicaTags (DualPipe's two pipelines) and kDataParallelTags (data-parallel replicas).
constexpr uint32_t kReplicaTags = 1u << 30;
constexpr uint32_t kDataParallelTags = 1u << 29;

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Several boundary tensors travel as one message: flattened and concatenated.
at::Tensor pack(const std::vector<at::Tensor>& tensors) {
  if (tensors.size() == 1) return tensors[0].contiguous().view({-1});
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

std::vector<at::Tensor> unpack(const at::Tensor& buffer, const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<at::Tensor> tensors;
  int64_t offset = 0;
  for (const auto& shape : shapes) {
    const int64_t n = numel_of(shape);
    tensors.push_back(buffer.narrow(0, offset, n).view(shape));
    offset += n;
  }
  return tensors;
}

int64_t total_numel(const std::vector<std::vector<int64_t>>& shapes) {
  int64_t n = 0;
  for (const auto& shape : shapes) n += numel_of(shape);
  return n;
}

void add_to(at::Tensor& sum, const at::Tensor& term) { sum = sum.defined() ? sum + term : term; }

// A copy in separate memory: host memory on a GPU build, a fresh buffer on a CPU build, so that an
// offload round trip is a real copy either way.
at::Tensor move_to_host(const at::Tensor& t) {
  return t.is_cuda() ? t.to(at::TensorOptions().device(at::kCPU).pinned_memory(true), /*non_blocking=*/true)
                     : t.clone();
}

}  // namespace

struct Executor::State {
  struct Micro {
    std::vector<at::Tensor> inputs;
    std::vector<Saved> saved;
    bool has_saved = false;
    bool offloaded = false;
    std::vector<at::Tensor> outputs;
    std::vector<at::Tensor> input_grads;
    std::vector<std::pair<int, at::Tensor>> pending_weight;  // (node, gradient of its output)
    // Recompute: outputs of in-chunk operators that feed a recomputed operator of another segment, kept
    // from F until the backward ends (per operator of the chunk; undefined elsewhere).
    std::vector<at::Tensor> checkpoints;
    std::vector<char> rebuilt;  // per operator of the chunk: its segment has been rebuilt since F
    double loss = 0;
    int64_t saved_bytes = 0;      // on the device: saved tensors not offloaded, and checkpoints
    int64_t offloaded_bytes = 0;  // on the host
  };
  struct Pending {
    std::unique_ptr<Transfer> transfer;
    at::Tensor buffer;
    int peer = -1;
    std::string posted_by;
  };
  struct Local {
    int stage = 0;
    int chunk = 0;
    ChunkModule module;
    std::vector<int> replicas;  // stages computing the same chunk, in pipeline order (itself included)
    std::unique_ptr<Optimizer> optimizer;
    bool has_opt_action = false;
    bool stepped = false;
    std::vector<char> recompute;  // per micro-batch: F drops what the recomputed operators save, R rebuilds it
    // Per operator of the chunk (node - module.begin), from the memory decisions: what R reruns and
    // what OFFLOAD moves.
    std::vector<char> recomputed_op, offloaded_op;
    bool offload_checkpoints = false;  // OFFLOAD/RELOAD move the checkpoints too
    // Per operator of the chunk: the first operator of its recompute segment (a run of recomputed
    // operators within one layer, as the memory model has it), -1 when it is not recomputed.
    std::vector<int> segment_of;
    bool split_backward = false;  // the rank runs I and W for this stage: R rebuilds every segment at once
    std::vector<Micro> micro;
    std::vector<Pending> recv_forward, recv_backward;  // per micro-batch
  };

  Schedule schedule;
  const ModelPlan& plan;
  Transport& transport;
  ExecutorOptions options;
  std::vector<const Hook*> hooks;  // per custom operation kind
  int rank = 0;  // the device this rank runs, its position in the pipeline group
  int me = 0;    // its job-wide rank, for messages
  int microbatches = 0;
  std::vector<int> local_of_stage;  // global stage -> index into locals, -1 elsewhere
  std::vector<Local> locals;
  std::vector<std::vector<int>> crossing_index;  // per chunk: node -> position in plan.crossing[chunk], -1
  std::vector<std::vector<std::vector<int64_t>>> crossing_shapes;  // per chunk
  std::vector<Pending> sends;
  int step = 0;
  int action_index = 0;
  const std::vector<MicroBatchData>* batch = nullptr;
  int64_t saved_bytes = 0, peak_saved = 0, offloaded_bytes = 0, peak_offloaded = 0;

  State(const Schedule& s, const ModelPlan& p, Transport& t, const HookRegistry& registry, ExecutorOptions o)
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
      throw Error(fmt::format("schedule {} has {} stages per pipeline but the model is cut into {} chunks",
                              schedule.name, schedule.stages_per_pipeline, plan.num_chunks()));
    for (const CustomOpKind& op : schedule.custom_ops) {
      const Hook* hook = registry.find(op.name);
      if (hook == nullptr) {
        std::string known;
        for (const std::string& n : registry.names()) known += (known.empty() ? "" : ", ") + n;
        throw Error(fmt::format("schedule {} uses operation {} but no hook is registered for it (registered: {}); "
                                "map it with --hook {}=noop|log|sleep:MS", schedule.name, op.name,
                                known.empty() ? "none" : known, op.name));
      }
      hooks.push_back(hook);
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
    const std::vector<int> segments = recompute_segments(
        plan.graph, plan.partition,
        decisions.empty() ? std::vector<MemoryDecision>(nodes, MemoryDecision::Recompute) : decisions);
    for (int s = 0; s < schedule.num_stages(); ++s) {
      if (schedule.stage_device[s] != rank) continue;
      local_of_stage[s] = static_cast<int>(locals.size());
      Local local;
      local.stage = s;
      local.split_backward = split_stages[s];
      local.chunk = schedule.chunk_of_stage(s);
      local.offload_checkpoints = !options.offload_checkpoints.empty() && options.offload_checkpoints[local.chunk];
      local.module = make_chunk_module(plan, local.chunk);
      for (int pipeline = 0; pipeline < schedule.num_pipelines; ++pipeline)
        local.replicas.push_back(pipeline * schedule.stages_per_pipeline + local.chunk);
      std::vector<at::Tensor> params;
      for (auto& op : local.module.operators)
        for (at::Tensor& p : op->parameters()) params.push_back(p);
      local.optimizer = std::make_unique<Optimizer>(options.optimizer, params);
      local.recompute.assign(microbatches, 0);
      for (int v = local.module.begin; v < local.module.end; ++v) {
        local.recomputed_op.push_back(decisions.empty() || decisions[v] == MemoryDecision::Recompute);
        local.offloaded_op.push_back(decisions.empty() || decisions[v] == MemoryDecision::Offload);
        local.segment_of.push_back(segments[v] < 0 ? -1 : segments[v] - local.module.begin);
      }
      local.micro.resize(microbatches);
      local.recv_forward.resize(microbatches);
      local.recv_backward.resize(microbatches);
      locals.push_back(std::move(local));
    }
    for (const Action& a : schedule.device_actions[rank]) {
      if (a.kind == ActionKind::R) locals[local_of_stage[a.stage]].recompute[a.microbatch] = 1;
      if (a.kind == ActionKind::Opt) locals[local_of_stage[a.stage]].has_opt_action = true;
    }
  }

  Local& local(int stage) { return locals[local_of_stage[stage]]; }

  std::string where(const Action& a) const {
    return fmt::format("rank {}: step {}, action {} ({})", me, step, action_index, schedule.action_name(a));
  }

  void wait(Transfer& transfer, const std::string& what) {
    const Clock::time_point begin = Clock::now();
    try {
      transfer.wait(options.timeout);
    } catch (const std::exception& e) {
      throw PeerFailure(fmt::format("{}: {}", what, e.what()));
    }
    waited_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - begin).count();
  }
  int64_t waited_ns = 0;
  int64_t compute_ns = 0;
  int64_t transfer_ns = 0;  // posting sends and receives (the transport's share, not the executor's)

  uint32_t forward_tag(int to_stage, int mb) const {
    return static_cast<uint32_t>((int64_t(mb) * schedule.num_stages() + to_stage) * 2);
  }
  uint32_t backward_tag(int from_stage, int mb) const { return forward_tag(from_stage, mb) + 1; }

  void post_send(const at::Tensor& data, int peer, uint32_t tag, const Action& a) {
    Pending p;
    p.buffer = data;
    p.peer = peer;
    p.posted_by = where(a);
    ComputeTimer timer{transfer_ns};
    p.transfer = transport.post_send(p.buffer, peer, tag);
    sends.push_back(std::move(p));
  }

  Pending post_recv(const std::vector<std::vector<int64_t>>& shapes, int peer, uint32_t tag, const Action& a) {
    Pending p;
    p.buffer = at::empty({total_numel(shapes)}, at::TensorOptions().dtype(plan.dtype));
    p.peer = peer;
    p.posted_by = where(a);
    ComputeTimer timer{transfer_ns};
    p.transfer = transport.post_recv(p.buffer, peer, tag);
    return p;
  }

  std::vector<at::Tensor> take(Pending& p, const std::vector<std::vector<int64_t>>& shapes, const std::string& use) {
    wait(*p.transfer, fmt::format("{}: waiting for rank {} (receive posted at {})", use, transport.global_rank(p.peer),
                                  p.posted_by));
    std::vector<at::Tensor> tensors = unpack(p.buffer, shapes);
    p = Pending{};
    return tensors;
  }

  void track(int64_t delta_saved, int64_t delta_offloaded) {
    saved_bytes += delta_saved;
    offloaded_bytes += delta_offloaded;
    peak_saved = std::max(peak_saved, saved_bytes);
    peak_offloaded = std::max(peak_offloaded, offloaded_bytes);
  }

  // Brings the byte counts of one micro-batch up to date: saved tensors of operators whose share is on
  // the host count there, everything else (saved tensors, checkpoints) on the device. A tensor that
  // two operators save (softmax and P V both save the probabilities) counts once.
  void account(const Local& l, Micro& m) {
    int64_t device = 0, host = 0;
    std::vector<const c10::TensorImpl*> counted;
    for (size_t i = 0; i < m.saved.size(); ++i)
      for (const at::Tensor& t : m.saved[i].tensors) {
        if (!t.defined() || std::find(counted.begin(), counted.end(), t.unsafeGetTensorImpl()) != counted.end()) continue;
        counted.push_back(t.unsafeGetTensorImpl());
        (m.offloaded && l.offloaded_op[i] ? host : device) += tensor_bytes(t);
      }
    for (const at::Tensor& t : m.checkpoints) (m.offloaded && l.offload_checkpoints ? host : device) += tensor_bytes(t);
    track(device - m.saved_bytes, host - m.offloaded_bytes);
    m.saved_bytes = device;
    m.offloaded_bytes = host;
  }

  // ---- compute ----
  // The value of input `p` of an operator of `l`: an in-chunk value from `values`, else a stage input.
  const at::Tensor& input_value(const Local& l, const Micro& m, const std::vector<at::Tensor>& values, int p) const {
    return p >= l.module.begin ? values[p - l.module.begin] : m.inputs[crossing_index[l.chunk][p]];
  }

  // F: every operator of the chunk. When the schedule recomputes (stage, mb), the operators decided
  // Recompute save nothing, and the outputs of the in-chunk operators they read from outside their
  // own segment are kept as checkpoints for the rebuild.
  void run_forward(Local& l, int mb) {
    const ChunkModule& mod = l.module;
    const int k = l.chunk;
    Micro& m = l.micro[mb];
    const MicroBatchData& data = (*batch)[mb];
    const bool recomputed = l.recompute[mb];
    std::vector<at::Tensor> values(mod.end - mod.begin);
    m.saved.assign(values.size(), Saved{});
    m.checkpoints.assign(values.size(), at::Tensor{});
    Saved discarded;
    for (int v = mod.begin; v < mod.end; ++v) {
      const int i = v - mod.begin;
      const bool drop = recomputed && l.recomputed_op[i];
      std::vector<at::Tensor> in;
      for (int p : plan.inputs[v]) {
        in.push_back(input_value(l, m, values, p));
        if (drop && p >= mod.begin && l.segment_of[p - mod.begin] != l.segment_of[i])
          m.checkpoints[p - mod.begin] = values[p - mod.begin];
      }
      ComputeTimer timer{compute_ns};
      values[i] = mod.operators[i]->forward(in, data, drop ? discarded : m.saved[i]);
      discarded.tensors.clear();
    }
    m.has_saved = !recomputed;
    m.rebuilt.assign(values.size(), 0);
    account(l, m);
    if (k + 1 < plan.num_chunks()) {
      m.outputs.clear();
      for (int u : plan.crossing[k + 1]) m.outputs.push_back(input_value(l, m, values, u));
    } else {
      m.loss = values.back().item<double>();
    }
  }

  // Rebuilds the recompute segment that starts at operator `first` of the chunk: its operators in
  // graph order, each reading what the segment rebuilt, a checkpoint or a stage input, refilling their
  // saved tensors.
  void rebuild_segment(Local& l, int mb, int first) {
    const ChunkModule& mod = l.module;
    Micro& m = l.micro[mb];
    const MicroBatchData& data = (*batch)[mb];
    std::vector<at::Tensor> values(mod.end - mod.begin);
    for (int i = first; i < mod.end - mod.begin && l.segment_of[i] == first; ++i) {
      const int v = mod.begin + i;
      std::vector<at::Tensor> in;
      for (int p : plan.inputs[v]) {
        if (p < mod.begin || l.segment_of[p - mod.begin] == first) in.push_back(input_value(l, m, values, p));
        else in.push_back(m.checkpoints[p - mod.begin]);
      }
      ComputeTimer timer{compute_ns};
      values[i] = mod.operators[i]->forward(in, data, m.saved[i]);
      m.rebuilt[i] = 1;
    }
    account(l, m);
  }

  // R. Before a whole backward it rebuilds the last segment only and B rebuilds the others as it
  // reaches them, so one segment is alive at a time; before a split one (I, then W on what the
  // weighted operators saved) it rebuilds them all.
  void run_recompute(Local& l, int mb) {
    const int n = l.module.end - l.module.begin;
    for (int i = n - 1; i >= 0; --i) {
      if (l.segment_of[i] != i) continue;
      rebuild_segment(l, mb, i);
      if (!l.split_backward) break;
    }
    if (l.split_backward) {  // every segment is rebuilt: the checkpoints have served
      l.micro[mb].checkpoints.clear();
      account(l, l.micro[mb]);
    }
    l.micro[mb].has_saved = true;
  }

  void forward(const Action& a, int stage, int mb) {
    Local& l = local(stage);
    Micro& m = l.micro[mb];
    if (l.chunk > 0) {
      Pending& p = l.recv_forward[mb];
      if (p.transfer) {
        m.inputs = take(p, crossing_shapes[l.chunk], where(a));
      } else {
        const int prev = schedule.prev_stage(stage);
        if (local_of_stage[prev] < 0 || local(prev).micro[mb].outputs.empty())
          throw Error(fmt::format("{}: the input of stage {} micro-batch {} was neither received nor computed here",
                                  where(a), stage, mb));
        m.inputs = std::move(local(prev).micro[mb].outputs);
        local(prev).micro[mb].outputs.clear();
      }
    }
    run_forward(l, mb);
  }

  void recompute(const Action& a, int stage, int mb) {
    Local& l = local(stage);
    Micro& m = l.micro[mb];
    if (m.saved.empty() || (l.chunk > 0 && m.inputs.empty()))
      throw Error(fmt::format("{}: recompute before the forward of stage {} micro-batch {}", where(a), stage, mb));
    if (m.offloaded)
      throw Error(fmt::format("{}: the activations of stage {} micro-batch {} are offloaded; RELOAD them before R",
                              where(a), stage, mb));
    run_recompute(l, mb);
  }

  std::vector<at::Tensor> output_gradients(const Action& a, Local& l, int mb) {
    Pending& p = l.recv_backward[mb];
    if (p.transfer) return take(p, crossing_shapes[l.chunk + 1], where(a));
    const int next = schedule.next_stage(l.stage);
    if (local_of_stage[next] < 0 || local(next).micro[mb].input_grads.empty())
      throw Error(fmt::format("{}: the output gradient of stage {} micro-batch {} was neither received nor computed here",
                              where(a), l.stage, mb));
    std::vector<at::Tensor> grads = std::move(local(next).micro[mb].input_grads);
    local(next).micro[mb].input_grads.clear();
    return grads;
  }

  void backward(const Action& a, int stage, int mb, bool split) {
    Local& l = local(stage);
    Micro& m = l.micro[mb];
    ChunkModule& mod = l.module;
    const int k = l.chunk;
    if (!m.has_saved)
      throw Error(fmt::format("{}: stage {} micro-batch {} has no saved activations (no forward, or dropped without "
                              "recompute)", where(a), stage, mb));
    if (m.offloaded)
      throw Error(fmt::format("{}: the activations of stage {} micro-batch {} are offloaded; RELOAD them first", where(a),
                              stage, mb));
    std::vector<at::Tensor> grads(mod.end - mod.begin);
    std::vector<at::Tensor> input_grads(plan.crossing[k].size());
    auto target = [&](int node) -> at::Tensor& {
      return mod.holds(node) ? grads[node - mod.begin] : input_grads[crossing_index[k][node]];
    };
    if (k + 1 == plan.num_chunks()) {
      grads.back() = at::full({}, 1.0 / (double(microbatches) * options.replicas), at::TensorOptions().dtype(plan.dtype));
    } else {
      const std::vector<at::Tensor> out = output_gradients(a, l, mb);
      for (size_t i = 0; i < out.size(); ++i) add_to(target(plan.crossing[k + 1][i]), out[i]);
    }
    for (int v = mod.end - 1; v >= mod.begin; --v) {
      const int i = v - mod.begin;
      const at::Tensor& g = grads[i];
      // A whole backward rebuilds each recompute segment when it reaches it and drops it after.
      const bool segment_by_segment = l.recompute[mb] && !l.split_backward && l.segment_of[i] >= 0;
      if (segment_by_segment && g.defined() && !m.rebuilt[i]) rebuild_segment(l, mb, l.segment_of[i]);
      if (g.defined()) {
        Operator& op = mod.op(v);
        const Saved& saved = m.saved[i];
        ComputeTimer timer{compute_ns};
        const std::vector<at::Tensor> in = op.backward_input(g, saved);
        for (size_t j = 0; j < in.size(); ++j)
          if (in[j].defined()) add_to(target(plan.inputs[v][j]), in[j]);
        if (op.has_parameters()) {
          if (split) m.pending_weight.emplace_back(v, g);
          else op.backward_weight(g, saved);
        }
      }
      if (segment_by_segment && l.segment_of[i] == i) {
        for (int j = i; j < mod.end - mod.begin && l.segment_of[j] == i; ++j) m.saved[j].tensors.clear();
        account(l, m);
      }
    }
    m.input_grads = std::move(input_grads);
    if (k == 0) m.input_grads.clear();
    // What only the input gradient needed goes now; W keeps the rest until it runs.
    for (int v = mod.begin; v < mod.end; ++v)
      if (!split || !mod.op(v).has_parameters()) m.saved[v - mod.begin].tensors.clear();
    if (!split) release(l, m);
    else account(l, m);
  }

  void weight(const Action& a, int stage, int mb) {
    Local& l = local(stage);
    Micro& m = l.micro[mb];
    if (m.offloaded)
      throw Error(fmt::format("{}: the activations of stage {} micro-batch {} are offloaded; RELOAD them first", where(a),
                              stage, mb));
    for (const auto& [node, g] : m.pending_weight) {
      ComputeTimer timer{compute_ns};
      l.module.op(node).backward_weight(g, m.saved[node - l.module.begin]);
    }
    m.pending_weight.clear();
    release(l, m);
  }

  void release(const Local& l, Micro& m) {
    m.saved.clear();
    m.checkpoints.clear();
    m.inputs.clear();
    m.has_saved = false;
    account(l, m);
  }

  // Moves the saved tensors of the operators decided Offload (all of them without decisions) to host
  // memory or back, once per distinct tensor, and the recompute checkpoints (received inputs included)
  // where the chunk offloads them.
  void transfer_saved(const Action& a, int stage, int mb, bool to_host) {
    Local& l = local(stage);
    Micro& m = l.micro[mb];
    if (m.offloaded == to_host)
      throw Error(fmt::format("{}: stage {} micro-batch {} is already {}", where(a), stage, mb,
                              to_host ? "offloaded" : "on the device"));
    std::vector<std::pair<const c10::TensorImpl*, at::Tensor>> moved;
    auto move = [&](at::Tensor& t) {
      if (!t.defined()) return;
      auto it = std::find_if(moved.begin(), moved.end(), [&](const auto& e) { return e.first == t.unsafeGetTensorImpl(); });
      if (it != moved.end()) {
        t = it->second;
        return;
      }
      const c10::TensorImpl* original = t.unsafeGetTensorImpl();
      at::Tensor copy = to_host ? move_to_host(t) : (t.clone());
      moved.emplace_back(original, copy);
      t = copy;
    };
    for (size_t i = 0; i < m.saved.size(); ++i)
      if (l.offloaded_op[i])
        for (at::Tensor& t : m.saved[i].tensors) move(t);
    // The received inputs are the rebuild's checkpoints too (the byte counts leave them out, as they
    // do on the device).
    if (l.offload_checkpoints && l.recompute[mb]) {
      for (at::Tensor& t : m.checkpoints) move(t);
      for (at::Tensor& t : m.inputs) move(t);
    }
    m.offloaded = to_host;
    account(l, m);
  }

  bool steps_at_opt() const {
    return schedule.num_pipelines == 1 && options.replicas == 1 && options.max_grad_norm == 0;
  }

  // Data parallelism: every replica holds the same stages; their gradients are exchanged and summed
  // in replica order on every holder, so the copies take identical steps.
  void synchronise_data_parallel() {
    if (options.replicas == 1) return;
    const int devices = schedule.num_devices;
    auto tag = [&](int stage) { return kDataParallelTags + static_cast<uint32_t>(stage); };
    std::vector<Pending> outgoing;
    std::vector<std::vector<Pending>> incoming(locals.size());
    for (size_t i = 0; i < locals.size(); ++i) {
      const at::Tensor mine = pack(gradients_of(locals[i]));
      incoming[i].resize(options.replicas);
      for (int r = 0; r < options.replicas; ++r) {
        if (r == options.replica) continue;
        const int peer = r * devices + rank;
        Pending out;
        out.buffer = mine;
        out.peer = peer;
        out.transfer = options.world->post_send(mine, peer, tag(locals[i].stage));
        outgoing.push_back(std::move(out));
        Pending& in = incoming[i][r];
        in.buffer = at::empty_like(mine);
        in.peer = peer;
        in.transfer = options.world->post_recv(in.buffer, peer, tag(locals[i].stage));
      }
    }
    std::vector<std::vector<at::Tensor>> sums;
    for (size_t i = 0; i < locals.size(); ++i) {
      std::vector<at::Tensor> grads = gradients_of(locals[i]);
      const at::Tensor mine = pack(grads);
      at::Tensor sum;
      for (int r = 0; r < options.replicas; ++r) {
        if (r == options.replica) {
          add_to(sum, mine);
          continue;
        }
        Pending& in = incoming[i][r];
        wait(*in.transfer, fmt::format("rank {}: step {}, data-parallel gradients of stage {}: waiting for rank {}", me,
                                       step, locals[i].stage, in.peer));
        add_to(sum, in.buffer);
      }
      std::vector<std::vector<int64_t>> shapes;
      for (const at::Tensor& g : grads) shapes.push_back(g.sizes().vec());
      sums.push_back(unpack(sum.clone(), shapes));
    }
    // What was sent may be a view of the gradients themselves: overwrite them only once it is out.
    for (Pending& p : outgoing)
      wait(*p.transfer, fmt::format("rank {}: step {}, data-parallel gradients: sending to rank {}", me, step, p.peer));
    for (size_t i = 0; i < locals.size(); ++i) {
      std::vector<at::Tensor> grads = gradients_of(locals[i]);
      for (size_t j = 0; j < grads.size(); ++j) grads[j].copy_(sums[i][j]);
    }
  }

  // torch.nn.utils.clip_grad_norm_ over the whole model: every chunk counted once (DualPipe's second
  // copy and the other data-parallel replicas hold the same gradients). Returns the norm.
  double clip_gradients() {
    if (options.max_grad_norm <= 0) return 0;
    double local = 0;
    for (Local& l : locals) {
      if (schedule.pipeline_of_stage(l.stage) != 0) continue;
      for (const at::Tensor& g : gradients_of(l)) local += g.to(at::kDouble).pow(2).sum().item<double>();
    }
    at::Tensor total = at::full({1}, options.replica == 0 ? local : 0.0, at::TensorOptions().dtype(at::kDouble));
    try {
      transport.all_reduce_sum(total, options.timeout);
    } catch (const std::exception& e) {
      throw PeerFailure(fmt::format("rank {}: step {}: summing the gradient norm over all ranks: {}", me, step, e.what()));
    }
    const double norm = std::sqrt(total.item<double>());
    const double coefficient = std::min(1.0, options.max_grad_norm / (norm + 1e-6));
    for (Local& l : locals)
      for (const at::Tensor& g : gradients_of(l)) g.mul_(coefficient);
    return norm;
  }

  void optimizer_step(Local& l) {
    const std::vector<at::Tensor> grads = gradients_of(l);
    ComputeTimer timer{compute_ns};
    l.optimizer->step(grads);
    l.stepped = true;
  }

  std::vector<at::Tensor> gradients_of(Local& l) {
    std::vector<at::Tensor> grads;
    for (auto& op : l.module.operators)
      for (at::Tensor& g : op->gradients()) grads.push_back(g);
    return grads;
  }

  // Stages that compute the same chunk in different pipelines (DualPipe) hold replicas of its
  // parameters: their gradients are summed, in pipeline order on every holder, before the step.
  void synchronise_replicas() {
    if (schedule.num_pipelines == 1) return;
    const int pipelines = schedule.num_pipelines;
    auto tag = [&](int stage) { return kReplicaTags + static_cast<uint32_t>(stage); };
    std::vector<Pending> incoming(schedule.num_stages());
    std::vector<Pending> outgoing;
    std::vector<std::vector<at::Tensor>> sums;
    for (Local& l : locals) {
      const at::Tensor mine = pack(gradients_of(l));
      for (int other : l.replicas) {
        const int device = schedule.stage_device[other];
        if (device == rank) continue;
        Pending p;
        p.buffer = mine;
        p.peer = device;
        p.transfer = transport.post_send(mine, device, tag(l.stage));
        outgoing.push_back(std::move(p));
        if (!incoming[other].transfer) {
          incoming[other].buffer = at::empty_like(mine);
          incoming[other].peer = device;
          incoming[other].transfer = transport.post_recv(incoming[other].buffer, device, tag(other));
        }
      }
    }
    for (Local& l : locals) {
      at::Tensor sum;
      for (int pipeline = 0; pipeline < pipelines; ++pipeline) {
        const int other = l.replicas[pipeline];
        at::Tensor part;
        if (schedule.stage_device[other] == rank) {
          part = pack(gradients_of(local(other)));
        } else {
          Pending& p = incoming[other];
          if (p.transfer) {
            wait(*p.transfer, fmt::format("rank {}: step {}, gradient exchange of chunk {}: waiting for rank {}", me,
                                          step, l.chunk, transport.global_rank(p.peer)));
            p.transfer.reset();
          }
          part = p.buffer;
        }
        add_to(sum, part);
      }
      const std::vector<at::Tensor> grads = gradients_of(l);
      std::vector<std::vector<int64_t>> shapes;
      for (const at::Tensor& g : grads) shapes.push_back(g.sizes().vec());
      sums.push_back(unpack(sum.clone(), shapes));
    }
    // What was sent may be a view of the gradients themselves: overwrite them only once it is out.
    for (Pending& p : outgoing)
      wait(*p.transfer, fmt::format("rank {}: step {}, gradient exchange: sending to rank {}", me, step,
                                    transport.global_rank(p.peer)));
    for (size_t i = 0; i < locals.size(); ++i) {
      std::vector<at::Tensor> grads = gradients_of(locals[i]);
      for (size_t j = 0; j < grads.size(); ++j) grads[j].copy_(sums[i][j]);
    }
  }

  void custom(const Action& a) {
    const CustomOpKind& op = schedule.custom_ops[a.custom];
    (*hooks[a.custom])(HookContext{op.name, rank, step, a.stage, a.microbatch});
  }

  void inject_fault() {
    const FaultInjection& f = options.fault;
    if (f.rank != rank || f.step != step || f.action != action_index) return;
    std::fflush(stdout);
    std::fflush(stderr);
    if (!f.hang) std::raise(SIGKILL);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }

  void execute(const Action& a) {
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
        local(a.stage).recv_forward[a.microbatch] = post_recv(crossing_shapes[local(a.stage).chunk],
                                                              schedule.stage_device[prev], forward_tag(a.stage, a.microbatch), a);
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
};

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
  for (int node = l.module.begin; node < l.module.end; ++node)
    result.emplace_back(node, l.module.operators[node - l.module.begin]->parameters());
  return result;
}

std::vector<std::pair<std::string, at::Tensor>> Executor::state() {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto& l : state_->locals) {
    const std::string stage = fmt::format("stage{}", l.stage);
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
    throw Error(fmt::format("step {}: {} micro-batches of data for a schedule of {}", step, batch.size(), s.microbatches));
  at::NoGradGuard no_grad;
  s.step = step;
  s.batch = &batch;
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
    throw PeerFailure(fmt::format("rank {}: step {}: waiting for every rank at the start of the step: {}", s.me, step,
                                  e.what()));
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
    const int64_t end = since_start();
    report.overhead_ns += end - begin - s.waited_ns - s.compute_ns - s.transfer_ns;
    if (s.options.record_trace) report.trace.push_back({s.action_index, begin, end, s.waited_ns});
  }
  for (auto& p : s.sends)
    s.wait(*p.transfer, fmt::format("{}: send to rank {} did not complete", p.posted_by, s.transport.global_rank(p.peer)));
  report.actions = static_cast<int64_t>(actions.size());
  s.sends.clear();
  s.synchronise_replicas();
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
