// Runs one rank's share of a schedule: walks the rank's lowered action list, one training step at a
// time. Semantics per action kind: docs/runtime.md. Transfers are posted at their SEND/RECV action
// and waited for right before the data is used (receives) or at the end of the step (sends); stages
// on the same rank hand tensors over directly.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "executor/hooks.h"
#include "executor/model_plan.h"
#include "executor/optimizer.h"
#include "flexpipe/ir/schedule.h"
#include "flexpipe/runtime/run_request.h"
#include "transport/transport.h"

namespace flexpipe::runtime {

// A peer failed or went silent, or a transfer broke: names this rank, the action and the peer.
class PeerFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ExecutorOptions {
  OptimizerConfig optimizer;
  // Where parameters, activations, gradients and optimizer state live; transfers between ranks are
  // staged through host memory (docs/runtime.md, "Devices").
  c10::Device device = at::kCPU;
  std::chrono::milliseconds timeout{60000};
  FaultInjection fault;
  bool record_trace = true;
  // Data parallelism: this pipeline is replica `replica` of `replicas`, and `world` reaches every
  // rank of the job (global rank = replica * devices + device). Each stage's gradients are summed
  // over the replicas before the optimizer step; the loss is the mean over all replicas' micro-batches.
  int replicas = 1;
  int replica = 0;
  Transport* world = nullptr;
  // Clip the gradients by their global norm over all stages (torch's clip_grad_norm_); 0: never.
  double max_grad_norm = 0;
  // One per graph node, or empty. For a (stage, micro-batch) with an R action, F drops the saved
  // tensors of the operators decided Recompute (every operator when empty) and keeps the others' plus,
  // as checkpoints, the in-stage inputs the recomputed operators read; R reruns only those operators.
  // OFFLOAD/RELOAD move the saved tensors of the operators decided Offload (every operator when empty).
  std::vector<MemoryDecision> memory_decisions;
  // Per model chunk, or empty: OFFLOAD/RELOAD also move the chunk's recompute checkpoints.
  std::vector<char> offload_checkpoints;
};

// One executed action: its index in the lowered list and when it ran, in nanoseconds since the step
// began on this rank (after the step's starting barrier).
struct ActionRecord {
  int32_t index = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int64_t wait_ns = 0;  // of which blocked waiting for a peer's data
};

struct StepReport {
  double loss = 0;                  // mean over all micro-batches (all ranks summed)
  std::vector<ActionRecord> trace;  // this rank's actions
  int64_t peak_saved_bytes = 0;     // held for backward passes, device side: saved tensors and recompute checkpoints
  int64_t peak_offloaded_bytes = 0;
  double seconds = 0;       // this rank's step, from the barrier to the last wait
  double grad_norm = 0;     // global gradient norm before clipping (0 unless clipping)
  int64_t overhead_ns = 0;  // summed over actions: neither computing, posting nor waiting for a transfer
  int64_t actions = 0;      // actions run
};

class Executor {
 public:
  // `schedule` must be valid; it is lowered here. Throws Error (before any communication) when the
  // schedule does not fit: world size vs devices, partition vs stages, a custom operation without hook.
  Executor(const Schedule& schedule, const ModelPlan& plan, Transport& transport, const HookRegistry& hooks,
           ExecutorOptions options);
  ~Executor();

  // One training step over this replica's micro-batches; `learning_rate` >= 0 sets the optimizer's
  // rate for this step (a schedule), otherwise the configured one is kept.
  StepReport run_step(int step, const std::vector<MicroBatchData>& batch, double learning_rate = -1);

  // Every tensor a checkpoint needs to resume exactly (parameters and optimizer state of each local
  // stage), by a name stable across runs, and the optimizer's step count.
  std::vector<std::pair<std::string, at::Tensor>> state();
  int optimizer_steps() const;
  // Copies saved values into the state; throws Error naming a missing or mis-shaped tensor.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& saved, int optimizer_steps);

  const Schedule& lowered() const;
  // Parameters of the stage's operators, in node order, for verification.
  std::vector<std::pair<int, std::vector<at::Tensor>>> stage_parameters(int stage) const;
  std::vector<int> local_stages() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace flexpipe::runtime
