// The memory model of one pipeline stage (a contiguous operator range) and the choice, per operator,
// between keeping, recomputing and offloading what it saves for the backward (DawnPiper's memory
// optimization). Formulas and assumptions: docs/partitioner.md, "Stage memory model".
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "flexpipe/costs/cost_graph.h"
#include "flexpipe/costs/stage_aggregation.h"
#include "flexpipe/ir/schedule.h"

namespace flexpipe {

// Per model chunk: the most micro-batches whose activations the chunk holds at once, read from the
// schedule's order (a forward adds one, the end of its backward, B or W, removes it). Over every
// stage that computes the chunk (DualPipe's two pipelines), the larger. 1F1B gives p - s, GPipe m.
std::vector<int> in_flight_per_chunk(const Schedule& schedule);
// Per model chunk: how many stages share the busiest device holding it (1 for one chunk per device).
std::vector<int> chunks_sharing_device(const Schedule& schedule);

// The graph's operators at one shape, flattened for the partitioner's inner loops.
struct OperatorTable {
  // `saved`: the bytes of the tensor that its reader saves and counts in its saved bytes
  // (TensorEdge::saved_bytes); negative where unknown (the reader is taken to save what it reads).
  struct InEdge {
    int from = 0;
    double bytes = 0;
    double saved = -1;
  };
  struct OutEdge {
    int to = 0;
    double bytes = 0;
    double saved = -1;
  };
  struct BufferRead {
    int id = 0;  // the buffer's index among the graph's buffer names
    double bytes = 0;
  };
  std::vector<double> forward, backward, saved, workspace, parameters;
  // Per node, the buffers and constants it holds (a capture's); empty: none in the graph. A stage holds
  // each once: buffer_bytes.
  std::vector<std::vector<BufferRead>> buffers;
  std::vector<double> shared;               // per node, saved bytes shared with node - 1; empty: none
  std::vector<double> output;               // per node, its output's bytes; empty: unbounded
  std::vector<std::vector<InEdge>> inputs;  // per node, its producers (an edge each)
  std::vector<int> tied_to;                 // kNotTied or the owner node
  std::vector<int> layer;                   // per node; empty: every node in one layer
  // An index of the edges for finding what crosses a cut fast (index_tensors; make_operator_table
  // builds it). Per node its consumers, ascending; per cut position j (0..n) the producers before j
  // that some operator at or after j reads, ascending: live[live_start[j] .. live_start[j + 1]).
  // Empty: the functions that need it read `inputs` instead, in time linear in the edges.
  std::vector<std::vector<OutEdge>> consumers;
  std::vector<int> live_start, live;
  int size() const { return static_cast<int>(forward.size()); }
  double buffer_bytes(int begin, int end) const;  // of the operators [begin, end), each buffer once
  bool indexed() const { return static_cast<int>(live_start.size()) == size() + 2; }
  bool same_layer(int u, int v) const { return layer.empty() || layer[u] == layer[v]; }
  // The saved bytes v shares with v - 1 when v - 1 is in the stage (v > begin).
  double shared_in_stage(int begin, int v) const { return v > begin && !shared.empty() ? shared[v] : 0; }
  // What v saves besides the tensors v - 1 saves too, when both hold theirs the same way (kept,
  // offloaded, or rebuilt in one segment) and v - 1 is in the stage.
  double saved_once(int begin, int v) const { return saved[v] - shared_in_stage(begin, v); }
  // What the reader of `out` saves of its tensor: what the edge says, or all the reader saves.
  double saved_of(const OutEdge& out) const { return out.saved >= 0 ? out.saved : saved[out.to]; }
};
OperatorTable make_operator_table(const CostGraph& graph, const Shape& shape);
// Builds the table's edge index (consumers, live) from its inputs: for tables built by hand, after
// their edges, where the partitioner's inner loops are to find the received tensors fast.
void index_tensors(OperatorTable& ops);

// A tensor the stage [begin, end) receives: produced before begin and read at or after it, whether
// by the stage or only by a later one (then the stage carries it through: it receives it and sends
// it on). `bytes`: what crosses the cut at begin from that producer (its edges to operators at or
// after begin, at most its output); `read_saved`: what the stage's operators that read it save of it
// (OperatorTable::saved_of). The runtime holds every tensor a stage receives until the micro-batch's
// backward ends. What the readers save of it is counted once,
// with the reader's decision (kept, offloaded, or a checkpoint where it is recomputed), and the
// rest, `held()`, is held as the stage input, k times: all of a tensor carried through unread, or
// read only by operators that save nothing (a residual add, a concatenation).
struct ReceivedTensor {
  int from = 0;
  double bytes = 0;
  double read_saved = 0;
  double held() const { return bytes > read_saved ? bytes - read_saved : 0; }
  double covered() const { return bytes - held(); }  // what the readers' saved bytes hold
};
// Ascending by producer.
std::vector<ReceivedTensor> received_tensors(const OperatorTable& ops, int begin, int end);
// The sum of held() over the received tensors: bytes per micro-batch the stage holds as its input.
double held_input_bytes(const OperatorTable& ops, int begin, int end);

// What a stage's memory and time depend on besides its operators.
struct StageContext {
  int in_flight = 1;          // k: micro-batches held at once (in_flight_per_chunk)
  double budget = kInfinity;  // bytes this stage may use
  double host_bandwidth = 0;  // bytes per time unit; 0: no offloading
  double period = 0;          // the pipeline's steady-state period (the target bottleneck time)
  // The stage's forward per micro-batch, the fastest pace of the warm-up's forwards; negative: the
  // sum of the range's forward times (what the model's entry points fill in).
  double forward_time = -1;
  double bytes_per_parameter = 16;  // weights + gradients + optimizer state
  bool allow_recompute = true;
  bool allow_offload = true;
  // How the recomputed operators are rebuilt. Whole backward (B): segment by segment inside it, so
  // one segment (a run of recomputed operators within one layer) is alive at a time. Split backward
  // (I + W): all at once before I, because W still needs what the weighted operators saved.
  bool split_backward = false;
  // Checkpoint offload: every recomputed micro-batch's checkpoints go to the host with what its
  // operators offload, right after F, and come back right before R. The reload is not hidden, so
  // only the micro-batch being rebuilt has its checkpoints back on the device.
  bool offload_checkpoints = false;
  // Asked between the solvers' steps: when it returns true, the search for the cheapest decisions
  // stops, and the answer is the least-memory decisions (found in one pass), which fit if anything
  // does. For anytime callers out of time, such as the search. Null: never.
  const std::function<bool()>* should_stop = nullptr;
  bool stopped() const { return should_stop != nullptr && *should_stop && (*should_stop)(); }
};
// Whether offloading checkpoints can save anything: a host link, recompute allowed, and more than
// one micro-batch in flight (the one being rebuilt has its checkpoints back).
bool can_offload_checkpoints(const StageContext& context);

enum class MemorySolver : uint8_t {
  Exact,   // dynamic programming over the operators (Pareto sets of memory, recompute time, offload bytes)
  Greedy,  // free offloads, then recompute chains and paid offloads by bytes saved per time added
  Auto,    // on stages of up to kExactSolverOperators operators the dynamic program with its Pareto
           // sets capped (fast, not always optimal), greedy above
};
inline constexpr int kExactSolverOperators = 16;
const char* memory_solver_name(MemorySolver solver);

// One stage's decisions and what they cost.
struct StageMemoryPlan {
  std::vector<MemoryDecision> decisions;  // per operator of the range
  double memory = 0;                      // static + workspace + activations, by the model
  double static_memory = 0;               // parameters x bytes per parameter
  double activation_memory = 0;
  double recompute_time = 0;         // per micro-batch
  double offload_bytes = 0;          // per micro-batch, checkpoints included when they are offloaded
  double checkpoint_bytes = 0;       // per micro-batch: what the recompute segments read from before them
  double input_bytes = 0;            // per micro-batch, held k times: received tensors no reader holds
  bool offload_checkpoints = false;  // the context this plan was made for
  double offload_time = 0;           // per micro-batch, beyond what the compute hides
  bool fits = false;                 // memory <= budget
  bool exact = true;                 // the solver proved optimality (the exact solver within its limits)
  double added_time() const { return recompute_time + offload_time; }
};

// The memory of [begin, end) with the given decisions (one per operator of the range), by the model:
//   static + max workspace + k*(kept + checkpoints + held inputs) + rebuilt + copies(offloaded) * offloaded,
// with tensors two neighbouring operators both save counted once where both keep them, both offload
// them or both rebuild them in one segment,
// where rebuilt is the largest recompute segment of one micro-batch (whole backward) or all its
// recomputed operators (split backward), checkpoints are, per segment, the stage's tensors it
// reads from before it (each once, at most its producer's output; of a received tensor, at most
// its covered() part), and held inputs are held_input_bytes (received tensors carried through or
// read only by operators that save nothing). With context.offload_checkpoints the checkpoints count
// as offloaded instead, and copies and penalty are those of a reload right before R; the held
// inputs stay on the device either way (the model does not plan their offload).
StageMemoryPlan evaluate_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& context,
                                      const std::vector<MemoryDecision>& decisions);
// The decisions with the least added time that fit the budget; `fits` is false when none does (then
// the decisions are those of the least memory found). Where can_offload_checkpoints, both ways of
// holding checkpoints are solved and the better plan says which it took (offload_checkpoints).
StageMemoryPlan optimize_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& context,
                                      MemorySolver solver = MemorySolver::Auto);

// The decisions with the least memory, whatever they cost in time (a dynamic program over the
// operators): whether the range can fit at all, and by how much it cannot. Offloaded checkpoints are
// tried too where can_offload_checkpoints.
StageMemoryPlan least_stage_memory(const OperatorTable& ops, int begin, int end, const StageContext& context);

}  // namespace flexpipe
