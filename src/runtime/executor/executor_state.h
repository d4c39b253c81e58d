// Executor::State, what one rank's executor holds across actions and steps, shared by the files that run it.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>

#include "device/device_placement.h"
#include "executor/executor.h"
#include "scripted_model/saved_tensor_hooks.h"
#include "scripted_model/scripted_model.h"

namespace flexpipe::runtime {

using Clock = std::chrono::steady_clock;

// Adds the time of its scope to `total`: what the operators and the optimizer take, so that the
// executor's own overhead per action can be told apart from compute.
struct ComputeTimer {
  int64_t& total;
  Clock::time_point start = Clock::now();
  ~ComputeTimer() { total += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count(); }
};

// Tags: one per (boundary, micro-batch, direction); gradient exchanges between copies of a stage above
// kReplicaTags (DualPipe's two pipelines), kDataParallelTags (data-parallel replicas) and kTiedTags
// (a weight tied across chunks).
constexpr uint32_t kReplicaTags = 1u << 30;
constexpr uint32_t kDataParallelTags = 1u << 29;
constexpr uint32_t kTiedTags = 1u << 28;

inline void add_to(at::Tensor& sum, const at::Tensor& term) { sum = sum.defined() ? sum + term : term; }

// Several boundary tensors travel as one message: flattened and concatenated (peer_channel.cpp).
at::Tensor pack(const std::vector<at::Tensor>& tensors);
std::vector<at::Tensor> unpack(const at::Tensor& buffer, const std::vector<std::vector<int64_t>>& shapes);

struct Executor::State {
  // One piece of a captured model's chunk (scripted_compute.cpp) for one micro-batch: an autograd
  // graph of its own, from leaves made of its inputs to its outputs.
  struct PieceRun {
    std::vector<at::Tensor> inputs;   // the leaves; while dropped, the checkpoints a rebuild starts from
    std::vector<at::Tensor> outputs;  // attached to the graph; empty while dropped or after its backward
    SavedTensors saved;
    bool dropped = false;                   // F ran it without autograd: R, or its backward, rebuilds it
    at::Tensor rng_state;                   // the generator before F ran it (random pieces), replayed by the rebuild
    std::vector<at::Tensor> seeded, seeds;  // split backward: the outputs and gradients W differentiates again
    // The rebuild's copies of the buffers it moves, which its graph saves: the model's state (as the
    // buffers themselves are), not activations. Held here so that their storages stay theirs.
    std::vector<at::Tensor> state_copies;
  };
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
    std::vector<char> rebuilt;     // per operator of the chunk: its segment has been rebuilt since F
    std::vector<PieceRun> pieces;  // captured models: one per piece of the chunk, then the loss on the last
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
    std::unique_ptr<ScriptedChunk> scripted;  // a captured model's chunk instead of the operators
    std::vector<int> replicas;                // stages computing the same chunk, in pipeline order (itself included)
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
  int rank = 0;                    // the device this rank runs, its position in the pipeline group
  int me = 0;                      // its job-wide rank, for messages
  int microbatches = 0;
  std::vector<int> local_of_stage;  // global stage -> index into locals, -1 elsewhere
  std::vector<Local> locals;
  std::vector<std::vector<int>> crossing_index;  // per chunk: node -> position in plan.crossing[chunk], -1
  std::vector<std::vector<std::vector<int64_t>>> crossing_shapes;  // per chunk
  // A captured model with dropout: the generator's state travels after the crossing tensors in every
  // forward transfer (generator_relay.h); empty otherwise.
  std::vector<int64_t> relayed_generator_shape;
  std::vector<std::vector<int64_t>> forward_shapes(int chunk) const;
  std::vector<Pending> sends;
  // A captured model's weights tied across chunks (an output layer reading the embedding's weight): per
  // weight, in state_dict-name order, every stage holding a copy with the copy's parameter index there.
  struct TiedWeight {
    std::string name;
    std::vector<std::pair<int, int>> copies;  // (stage, parameter), in stage order
  };
  std::vector<TiedWeight> tied;
  int step = 0;
  int action_index = 0;
  std::vector<MicroBatchData> placed_batch;  // the step's data on the device
  const std::vector<MicroBatchData>* batch = nullptr;
  int64_t saved_bytes = 0, peak_saved = 0, offloaded_bytes = 0, peak_offloaded = 0;
  int64_t waited_ns = 0;  // per action: blocked waiting for a peer
  int64_t compute_ns = 0;
  int64_t transfer_ns = 0;  // posting sends and receives (the transport's share, not the executor's)

  // Checks the schedule against the job and builds this rank's stages (executor.cpp).
  State(const Schedule& s, const ModelPlan& p, Transport& t, const HookRegistry& registry, ExecutorOptions o);

  Local new_local(int stage, bool split_backward) const;
  void build_scripted_stages();
  void mark_recomputed_and_stepped();

  Local& local(int stage) { return locals[local_of_stage[stage]]; }

  // The step's dispatch (executor.cpp).
  std::string where(const Action& a) const;
  void execute(const Action& a);
  void custom(const Action& a);
  void inject_fault();
  void optimizer_step(Local& l);

  // Point-to-point transfers between stages on different ranks (peer_channel.cpp).
  void wait(Transfer& transfer, const std::string& what);
  uint32_t forward_tag(int to_stage, int mb) const;
  uint32_t backward_tag(int from_stage, int mb) const;
  void post_send(const at::Tensor& data, int peer, uint32_t tag, const Action& a);
  Pending post_recv(const std::vector<std::vector<int64_t>>& shapes, int peer, uint32_t tag, const Action& a);
  std::vector<at::Tensor> take(Pending& p, const std::vector<std::vector<int64_t>>& shapes, const std::string& use);

  // A stage's F, B, I, W, R, OFFLOAD and RELOAD, and the bytes it holds for them (stage_compute.cpp).
  void forward(const Action& a, int stage, int mb);
  void backward(const Action& a, int stage, int mb, bool split);
  void weight(const Action& a, int stage, int mb);
  void recompute(const Action& a, int stage, int mb);
  void transfer_saved(const Action& a, int stage, int mb, bool to_host);
  const at::Tensor& input_value(const Local& l, const Micro& m, const std::vector<at::Tensor>& values, int p) const;
  void run_forward(Local& l, int mb);
  void rebuild_segment(Local& l, int mb, int first);
  void run_recompute(Local& l, int mb);
  std::vector<at::Tensor> output_gradients(const Action& a, Local& l, int mb);
  void release(const Local& l, Micro& m);
  void track(int64_t delta_saved, int64_t delta_offloaded);
  void account(const Local& l, Micro& m);

  // The same for a captured model's chunk, run piece by piece through autograd (scripted_compute.cpp).
  void scripted_forward(Local& l, int mb);
  void resume_relayed_generator(Local& l, int mb);
  void scripted_backward(Local& l, int mb, const std::vector<at::Tensor>& output_grads, bool split);
  void scripted_weight(Local& l, int mb);
  void scripted_recompute(Local& l, int mb);
  void scripted_transfer(Local& l, int mb, bool to_host);
  void scripted_account(const Local& l, Micro& m);
  void run_piece(Local& l, Micro& m, int piece, std::map<std::string, at::Tensor>& values, bool dropped);
  void rebuild_piece(Local& l, Micro& m, int piece);
  void differentiate(Local& l, PieceRun& run, const std::vector<std::string>& input_names,
                     const std::vector<int>& parameters, std::map<std::string, at::Tensor>& grads,
                     const std::vector<std::string>& output_names, bool split);

  // The gradients of every copy of a stage summed, and clipped, before the optimizer steps (gradient_sync.cpp).
  bool steps_at_opt() const;
  std::vector<at::Tensor> gradients_of(Local& l);
  void synchronise_replicas();
  void synchronise_tied();
  void synchronise_data_parallel();
  double clip_gradients();
};

}  // namespace flexpipe::runtime
