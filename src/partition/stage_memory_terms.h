// Internal: the terms of the stage memory model that both the model and its solvers price decisions with.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "flexpipe/partition/stage_memory.h"

namespace flexpipe::partition {

// Whether a recomputed v continues its predecessor's recompute segment. A segment is a run of
// recomputed operators within one layer: the granularity at which Megatron's full recompute
// checkpoints, so a segment never holds more than one layer's activations.
inline bool continues_segment(const OperatorTable& ops, int begin, int v, bool previous_recomputed) {
  return previous_recomputed && v > begin && v < ops.size() && ops.same_layer(v - 1, v);
}

// The tensors the stage [begin, end) receives, and what of them it holds as its input
// (received_tensors, held_input_bytes), found once per stage for the model's inner loops.
struct StageInputs {
  int begin = 0;
  std::vector<ReceivedTensor> received;  // ascending by producer
  double held = 0;                       // the sum of their held() parts
  // The most of `producer`'s output a checkpoint may keep: a received tensor's covered() part (the
  // rest is held as the stage input already), the whole output of an operator of the stage.
  double checkpoint_limit(const OperatorTable& ops, int producer) const;
};
StageInputs stage_inputs(const OperatorTable& ops, int begin, int end);

// What a recomputed v adds to the checkpoints of its segment, which starts at segment_start: the
// tensors it reads that were produced before the segment, in the stage or received from an earlier
// one, each kept once per segment and at most its producer's whole output (the segment's operators
// may read slices of it), or of a received tensor what the stage input does not hold already. The
// segment rebuilds what it reads from itself.
double checkpoint_bytes(const OperatorTable& ops, const StageInputs& inputs, int v, int segment_start);

// The part of a recomputed v's saved bytes that is a tensor produced before its segment (where the
// edges say what their readers save): that tensor is the segment's checkpoint, which the rebuild
// reads in place rather than making again.
double checkpointed_saved(const OperatorTable& ops, int v, int segment_start);

// Forwards arrive one per third of a period at most (a backward takes about twice a forward), so a
// transfer of t spans ceil(t / (T/3)) forward slots: that many micro-batches' offloaded bytes are still
// on their way out, besides the one just produced and the one reloaded for the next backward (its
// reload overlaps the compute action before that backward).
inline double forward_slot(const StageContext& context) { return context.period / 3; }

inline double transfer_time(double offload_bytes, const StageContext& context) {
  return context.host_bandwidth > 0 ? offload_bytes / context.host_bandwidth : kInfinity;
}

// The warm-up's k forwards run back to back, one per forward time f at best. Where a transfer takes
// longer than f the copies queue on the host link: after the k-th forward, k - floor((k - 1) f / t)
// of them have not left (the one going out included). Deep pipelines (k in the tens) pile up most.
inline double warm_up_backlog(double t, const StageContext& context) {
  if (!(t > context.forward_time)) return 0;
  const double k = context.in_flight;
  return k - std::floor((k - 1) * context.forward_time / t + 1e-12);
}

// Copies on the device while a backward runs: the one reloaded for it, the one just made and those
// still on their way out (the transfer spans `slots` forward slots), when the reload starts a compute
// action ahead. A reload right before R (checkpoint offload) starts with the newest one's offload and
// takes as long, so R finds only transfers older than one slot still going out: `slots` copies in all.
// At the first backward, the warm-up's backlog and that backward's reload.
inline double offload_copies(double offload_bytes, const StageContext& context) {
  const double t = transfer_time(offload_bytes, context);
  const double slots = std::max(1.0, std::ceil(t / forward_slot(context) - 1e-12));
  const double steady = context.offload_checkpoints ? slots : 2 + slots;
  return std::min<double>(context.in_flight, std::max(steady, 1 + warm_up_backlog(t, context)));
}

// The context of the stage [begin, end), with its forward time where the caller left it out; throws
// Error when the range is not the graph's.
StageContext checked_stage_context(const OperatorTable& ops, int begin, int end, StageContext context);

// The offloaded bytes' share of the peak. `rebuilt`: what the backward rebuilds besides (0 when not
// known). With a reload right before R, while R waits the micro-batch's data comes in as the newest
// one's goes out: two copies and nothing rebuilt yet.
inline double offloaded_held(double offload_bytes, const StageContext& context, double rebuilt = 0) {
  if (offload_bytes <= 0) return 0;
  const double held = offload_copies(offload_bytes, context) * offload_bytes;
  if (!context.offload_checkpoints) return held;
  return std::max(held, std::min(context.in_flight, 2) * offload_bytes - rebuilt);
}

// The reload starts one compute action (about a forward slot) ahead of the backward; the backward
// waits for whatever of the transfer is left. Right before R, it waits for all of it.
inline double offload_penalty(double offload_bytes, const StageContext& context) {
  if (offload_bytes <= 0) return 0;
  if (context.host_bandwidth <= 0) return kInfinity;
  const double t = transfer_time(offload_bytes, context);
  return context.offload_checkpoints ? t : std::max(0.0, t - forward_slot(context));
}

// What a stage holds whatever it decides: its parameters' state (a tied copy whose owner is in the
// stage counts once) and the largest workspace.
struct FixedMemory {
  double static_memory = 0;
  double workspace = 0;
};
FixedMemory fixed_memory(const OperatorTable& ops, int begin, int end, const StageContext& context);

// Offloading keeps at least 3 copies on the device (1 with a reload right before R): it pays only
// with more micro-batches in flight.
inline bool can_offload(const OperatorTable& ops, int v, const StageContext& context) {
  const int least_in_flight = context.offload_checkpoints ? 2 : 4;
  return context.allow_offload && context.host_bandwidth > 0 && context.in_flight >= least_in_flight &&
         ops.saved[v] > 0;
}

// Where the checkpoints of a recomputed operator go: k copies on the device, or offloaded bytes.
inline void add_checkpoints(double bytes, const StageContext& context, double& memory, double& offload) {
  if (context.offload_checkpoints)
    offload += bytes;
  else
    memory += context.in_flight * bytes;
}

}  // namespace flexpipe::partition
