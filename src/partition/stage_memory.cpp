// The stage memory model: in-flight counts, the operator table, and what a stage's decisions hold and cost.
#include "flexpipe/partition/stage_memory.h"

#include <algorithm>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "flexpipe/support/error.h"
#include "stage_memory_terms.h"

namespace flexpipe {

namespace {

// Per global stage: the most micro-batches held at once, walking every device list once.
std::vector<int> peak_held(const Schedule& schedule) {
  std::vector<int> held(schedule.num_stages(), 0), peak(schedule.num_stages(), 0);
  for (const std::vector<Action>& actions : schedule.device_actions)
    for (const Action& a : actions) {
      auto add = [&](int stage) { peak[stage] = std::max(peak[stage], ++held[stage]); };
      switch (a.kind) {
        case ActionKind::F: add(a.stage); break;
        case ActionKind::B:
        case ActionKind::W: --held[a.stage]; break;
        case ActionKind::Overlap:
          add(a.stage);
          if (a.sub_kind == ActionKind::B) --held[a.stage2];
          break;
        default: break;
      }
    }
  return peak;
}

}  // namespace

std::vector<int> in_flight_per_chunk(const Schedule& schedule) {
  const std::vector<int> peak = peak_held(schedule);
  std::vector<int> chunks(schedule.stages_per_pipeline, 0);
  for (int s = 0; s < schedule.num_stages(); ++s)
    chunks[schedule.chunk_of_stage(s)] = std::max(chunks[schedule.chunk_of_stage(s)], peak[s]);
  return chunks;
}

std::vector<int> chunks_sharing_device(const Schedule& schedule) {
  std::vector<int> per_device(schedule.num_devices, 0);
  for (int s = 0; s < schedule.num_stages(); ++s) ++per_device[schedule.stage_device[s]];
  std::vector<int> chunks(schedule.stages_per_pipeline, 1);
  for (int s = 0; s < schedule.num_stages(); ++s)
    chunks[schedule.chunk_of_stage(s)] =
        std::max(chunks[schedule.chunk_of_stage(s)], per_device[schedule.stage_device[s]]);
  return chunks;
}

OperatorTable make_operator_table(const CostGraph& graph, const Shape& shape) {
  OperatorTable ops;
  const int n = static_cast<int>(graph.nodes.size());
  ops.forward.resize(n);
  ops.backward.resize(n);
  ops.saved.resize(n);
  ops.workspace.resize(n);
  ops.parameters.resize(n);
  ops.inputs.resize(n);
  ops.tied_to.resize(n);
  ops.layer.resize(n);
  ops.output.resize(n);
  bool shares = false;
  std::unordered_map<std::string, int> buffer_ids;
  for (int i = 0; i < n; ++i) {
    const OperatorNode& node = graph.nodes[i];
    ops.forward[i] = operator_time(graph, node, Pass::Forward, shape);
    ops.backward[i] = operator_time(graph, node, Pass::BackwardInput, shape) +
                      operator_time(graph, node, Pass::BackwardWeight, shape);
    ops.saved[i] = node.saved_bytes.at(shape.microbatch_size, shape.seq_len);
    ops.workspace[i] = node.workspace_bytes.at(shape.microbatch_size, shape.seq_len);
    ops.parameters[i] = node.parameters;
    for (const BufferUse& buffer : node.buffers) {
      const auto [it, added] = buffer_ids.try_emplace(buffer.name, static_cast<int>(buffer_ids.size()));
      ops.buffers.resize(n);
      ops.buffers[i].push_back({it->second, buffer.bytes});
    }
    ops.tied_to[i] = node.tied_to;
    ops.layer[i] = node.layer;
    ops.output[i] = node.output_bytes.at(shape.microbatch_size, shape.seq_len);
    shares = shares || !node.shared_saved_bytes.is_zero();
  }
  if (shares) {
    ops.shared.resize(n);
    for (int i = 0; i < n; ++i)
      ops.shared[i] = graph.nodes[i].shared_saved_bytes.at(shape.microbatch_size, shape.seq_len);
  }
  for (const TensorEdge& edge : graph.edges)
    ops.inputs[edge.to].push_back({edge.from, edge.bytes.at(shape.microbatch_size, shape.seq_len),
                                   edge.saved_bytes ? edge.saved_bytes->at(shape.microbatch_size, shape.seq_len) : -1});
  index_tensors(ops);
  return ops;
}

void index_tensors(OperatorTable& ops) {
  const int n = ops.size();
  ops.consumers.assign(n, {});
  for (int v = 0; v < n; ++v)
    for (const OperatorTable::InEdge& in : ops.inputs[v]) ops.consumers[in.from].push_back({v, in.bytes, in.saved});
  // Producer u crosses the cuts u + 1 .. its last consumer.
  std::vector<int> last(n, -1);
  ops.live_start.assign(n + 2, 0);
  for (int u = 0; u < n; ++u) {
    for (const OperatorTable::OutEdge& out : ops.consumers[u]) last[u] = std::max(last[u], out.to);
    for (int j = u + 1; j <= last[u]; ++j) ++ops.live_start[j + 1];
  }
  for (int j = 0; j <= n; ++j) ops.live_start[j + 1] += ops.live_start[j];
  ops.live.assign(ops.live_start[n + 1], 0);
  std::vector<int> next(ops.live_start.begin(), ops.live_start.end() - 1);
  for (int u = 0; u < n; ++u)
    for (int j = u + 1; j <= last[u]; ++j) ops.live[next[j]++] = u;
}

std::vector<ReceivedTensor> received_tensors(const OperatorTable& ops, int begin, int end) {
  std::vector<ReceivedTensor> received;
  auto bounded = [&](ReceivedTensor& r) {
    if (!ops.output.empty()) r.bytes = std::min(r.bytes, ops.output[r.from]);
  };
  if (ops.indexed()) {
    for (int i = ops.live_start[begin]; i < ops.live_start[begin + 1]; ++i) {
      ReceivedTensor r{ops.live[i], 0, 0};
      for (const OperatorTable::OutEdge& out : ops.consumers[r.from]) {
        if (out.to < begin) continue;
        r.bytes += out.bytes;
        if (out.to < end) r.read_saved += ops.saved_of(out);
      }
      bounded(r);
      received.push_back(r);
    }
    return received;
  }
  for (int v = begin; v < ops.size(); ++v)
    for (const OperatorTable::InEdge& in : ops.inputs[v]) {
      if (in.from >= begin) continue;
      auto it =
          std::find_if(received.begin(), received.end(), [&](const ReceivedTensor& r) { return r.from == in.from; });
      if (it == received.end()) it = received.insert(received.end(), ReceivedTensor{in.from, 0, 0});
      it->bytes += in.bytes;
      if (v < end) it->read_saved += ops.saved_of({v, in.bytes, in.saved});
    }
  for (ReceivedTensor& r : received) bounded(r);
  std::sort(received.begin(), received.end(),
            [](const ReceivedTensor& a, const ReceivedTensor& b) { return a.from < b.from; });
  return received;
}

double held_input_bytes(const OperatorTable& ops, int begin, int end) {
  double held = 0;
  for (const ReceivedTensor& r : received_tensors(ops, begin, end)) held += r.held();
  return held;
}

bool can_offload_checkpoints(const StageContext& context) {
  return context.allow_offload && context.allow_recompute && context.host_bandwidth > 0 && context.in_flight > 1;
}

StageMemoryPlan evaluate_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& stage_context,
                                      const std::vector<MemoryDecision>& decisions) {
  const StageContext context = partition::checked_stage_context(ops, begin, end, stage_context);
  if (static_cast<int>(decisions.size()) != end - begin)
    throw Error(fmt::format("{} memory decisions for a stage of {} operators", decisions.size(), end - begin));
  const double k = context.in_flight;
  const partition::FixedMemory fixed = partition::fixed_memory(ops, begin, end, context);
  StageMemoryPlan plan;
  plan.decisions = decisions;
  plan.static_memory = fixed.static_memory;
  const partition::StageInputs inputs = partition::stage_inputs(ops, begin, end);
  double kept = 0, offloaded = 0, checkpoints = 0, rebuilt_all = 0, segment = 0, largest_segment = 0;
  int segment_start = begin;
  const bool sharing = !ops.shared.empty();
  for (int v = begin; v < end; ++v) {
    const MemoryDecision decision = decisions[v - begin];
    const bool as_previous = v > begin && decisions[v - 1 - begin] == decision;
    // Tensors v shares with v - 1 are held once when both decided alike (and, rebuilt, in one segment).
    const double shared = sharing && as_previous ? ops.shared_in_stage(begin, v) : 0;
    switch (decision) {
      case MemoryDecision::Keep: kept += ops.saved[v] - shared; break;
      case MemoryDecision::Offload: offloaded += ops.saved[v] - shared; break;
      case MemoryDecision::Recompute: {
        const bool continues = partition::continues_segment(ops, begin, v, as_previous);
        if (!continues) segment_start = v;
        const double bytes = std::max(0.0, ops.saved[v] - (continues ? shared : 0) -
                                               partition::checkpointed_saved(ops, v, segment_start));
        segment = (continues ? segment : 0) + bytes;
        largest_segment = std::max(largest_segment, segment);
        rebuilt_all += bytes;
        checkpoints += partition::checkpoint_bytes(ops, inputs, v, segment_start);
        plan.recompute_time += ops.forward[v];
        break;
      }
    }
  }
  const double rebuilt = context.split_backward ? rebuilt_all : largest_segment;
  // The stage input: received tensors that no reader's saved bytes hold, on the device until the
  // backward ends (the runtime also moves them to the host with offloaded checkpoints; the model
  // keeps them here, which overstates such a stage's memory by at most k - 1 copies of them).
  double held = k * (kept + inputs.held), moved = offloaded;
  partition::add_checkpoints(checkpoints, context, held, moved);
  // Split, the rebuild's share is not credited against the reload (the dynamic program cannot tell it).
  plan.activation_memory =
      held + rebuilt + partition::offloaded_held(moved, context, context.split_backward ? 0 : rebuilt);
  plan.memory = fixed.static_memory + fixed.workspace + plan.activation_memory;
  plan.offload_bytes = moved;
  plan.checkpoint_bytes = checkpoints;
  plan.input_bytes = inputs.held;
  plan.offload_checkpoints = context.offload_checkpoints;
  plan.offload_time = partition::offload_penalty(moved, context);
  plan.fits = plan.memory <= context.budget && plan.offload_time < kInfinity;
  return plan;
}

namespace partition {

StageInputs stage_inputs(const OperatorTable& ops, int begin, int end) {
  StageInputs inputs;
  inputs.begin = begin;
  inputs.received = received_tensors(ops, begin, end);
  for (const ReceivedTensor& r : inputs.received) inputs.held += r.held();
  return inputs;
}

double StageInputs::checkpoint_limit(const OperatorTable& ops, int producer) const {
  if (producer < begin) {
    const auto it = std::lower_bound(received.begin(), received.end(), producer,
                                     [](const ReceivedTensor& r, int from) { return r.from < from; });
    if (it != received.end() && it->from == producer) return it->covered();
  }
  return ops.output.empty() ? kInfinity : ops.output[producer];
}

double checkpoint_bytes(const OperatorTable& ops, const StageInputs& inputs, int v, int segment_start) {
  double bytes = 0;
  for (const OperatorTable::InEdge& in : ops.inputs[v]) {
    if (in.from >= segment_start) continue;
    double read = 0;  // by the segment's earlier operators
    for (int u = segment_start; u < v; ++u)
      for (const OperatorTable::InEdge& earlier : ops.inputs[u])
        if (earlier.from == in.from) read += earlier.bytes;
    const double limit = inputs.checkpoint_limit(ops, in.from);
    bytes += std::min(limit, read + in.bytes) - std::min(limit, read);
  }
  return bytes;
}

double checkpointed_saved(const OperatorTable& ops, int v, int segment_start) {
  double bytes = 0;
  for (const OperatorTable::InEdge& in : ops.inputs[v])
    if (in.from < segment_start && in.saved > 0) bytes += in.saved;
  return bytes;
}

}  // namespace partition

double OperatorTable::buffer_bytes(int begin, int end) const {
  if (buffers.empty()) return 0;
  // Held once per stage however many of its operators read it: the few buffers a range holds, by id.
  std::vector<int> held;
  double total = 0;
  for (int v = begin; v < end; ++v)
    for (const BufferRead& read : buffers[v])
      if (std::find(held.begin(), held.end(), read.id) == held.end()) {
        held.push_back(read.id);
        total += read.bytes;
      }
  return total;
}

namespace partition {

StageContext checked_stage_context(const OperatorTable& ops, int begin, int end, StageContext context) {
  if (begin < 0 || end > ops.size() || begin > end)
    throw Error(fmt::format("operator range [{}, {}) outside the graph's {} operators", begin, end, ops.size()));
  if (context.forward_time < 0) {
    context.forward_time = 0;
    for (int v = begin; v < end; ++v) context.forward_time += ops.forward[v];
  }
  return context;
}

FixedMemory fixed_memory(const OperatorTable& ops, int begin, int end, const StageContext& context) {
  FixedMemory fixed;
  double parameters = 0;
  for (int v = begin; v < end; ++v) {
    const int owner = ops.tied_to[v];
    if (!(owner != kNotTied && owner >= begin && owner < end)) parameters += ops.parameters[v];
    fixed.workspace = std::max(fixed.workspace, ops.workspace[v]);
  }
  fixed.static_memory = parameters * context.bytes_per_parameter + ops.buffer_bytes(begin, end);
  return fixed;
}

}  // namespace partition

}  // namespace flexpipe
