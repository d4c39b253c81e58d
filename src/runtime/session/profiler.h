// Measures a trainable model operator by operator on this machine — forward, input gradient and
// weight gradient time (median of repeats after warm-up), the bytes each forward saves, its output,
// and the transient workspace of its passes (a counting allocator's high-water mark) — and returns the model's cost
// graph with those measurements in place of the analytic estimates, as DawnPiper profiles before it partitions. The
// simulator, the partitioner and `train --schedule auto` read it like any cost graph.
#pragma once
#include "executor/model_plan.h"
#include "flexpipe/costs/cost_graph.h"

namespace flexpipe::runtime {

struct ProfileOptions {
  int warmup = 2;
  int repeats = 7;
  // Where the operators run. On a device other than the host the transient workspace keeps the
  // analytic estimate: the counting allocator sees host allocations only.
  c10::Device device = at::kCPU;
};

// Times are in milliseconds and scale by a power law from the measured shape (linear in the batch;
// in the sequence, linear for token-wise operators and quadratic for attention scores).
CostGraph profile_model(const ModelPlan& plan, const ProfileOptions& options);

}  // namespace flexpipe::runtime
