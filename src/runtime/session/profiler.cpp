// Timing a trainable model's operators one by one on this machine into a measured cost graph.
#include "session/profiler.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/CPUAllocator.h>
#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "builtin_model/data_source.h"
#include "builtin_model/operator_kinds.h"
#include "device/device_placement.h"
#include "flexpipe/support/statistics.h"

namespace flexpipe::runtime {

namespace {

using Clock = std::chrono::steady_clock;

// The pass's time on `device`: from an idle queue to the end of its last kernel.
template <typename F>
double time_ms(c10::Device device, F&& f) {
  synchronize(device);
  const Clock::time_point start = Clock::now();
  f();
  synchronize(device);
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Wraps the CPU allocator while profiling to count live bytes and their high-water mark: what an
// operator's pass allocates beyond what it keeps is its transient workspace.
class CountingAllocator final : public c10::Allocator {
 public:
  CountingAllocator() : base_(c10::GetCPUAllocator()) {
    active_ = this;
    c10::SetCPUAllocator(this, kPriority);
  }
  ~CountingAllocator() override {
    c10::SetCPUAllocator(base_, kPriority);
    active_ = nullptr;
  }
  CountingAllocator(const CountingAllocator&) = delete;
  CountingAllocator& operator=(const CountingAllocator&) = delete;

  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr inner = base_->allocate(bytes);
    void* data = inner.get();
    const c10::Device device = inner.device();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_ += static_cast<int64_t>(bytes);
      peak_ = std::max(peak_, live_);
      blocks_.emplace(data, Block{std::move(inner), bytes});
    }
    // Some kernels allocate raw memory and free it through raw_deleter(): data and context coincide.
    return {data, data, &release, device};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* destination, const void* source, size_t bytes) const override {
    default_copy_data(destination, source, bytes);
  }

  int64_t live() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_;
  }
  // Starts a new high-water mark at the current level.
  void reset_peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = live_;
  }
  int64_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }

 private:
  static constexpr uint8_t kPriority = 200;
  struct Block {
    c10::DataPtr inner;
    size_t bytes = 0;
  };
  static void release(void* data) {
    c10::DataPtr freed;  // destroyed after the lock is released
    if (active_ == nullptr) return;
    std::lock_guard<std::mutex> lock(active_->mutex_);
    auto it = active_->blocks_.find(data);
    if (it == active_->blocks_.end()) return;
    active_->live_ -= static_cast<int64_t>(it->second.bytes);
    freed = std::move(it->second.inner);
    active_->blocks_.erase(it);
  }
  static inline CountingAllocator* active_ = nullptr;
  c10::Allocator* base_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, Block> blocks_;
  mutable int64_t live_ = 0;
  mutable int64_t peak_ = 0;
};

// The polynomial scaled so that it equals `measured` at the reference shape (keeps how it grows).
ShapePolynomial rescaled(const ShapePolynomial& analytic, double measured, const Shape& shape) {
  const double at = analytic.at(shape.microbatch_size, shape.seq_len);
  if (at <= 0) return measured > 0 ? per_token(measured / (shape.microbatch_size * shape.seq_len)) : ShapePolynomial{};
  return (measured / at) * analytic;
}

// The bytes of v's saved tensors that v - 1 saves too, where v - 1 feeds v in the same layer (the
// cost graph's shared_saved_bytes).
int64_t shared_saved_bytes(const ModelPlan& plan, const std::vector<Saved>& saved, int v) {
  if (v == 0 || plan.graph.nodes[v].layer != plan.graph.nodes[v - 1].layer ||
      std::find(plan.inputs[v].begin(), plan.inputs[v].end(), v - 1) == plan.inputs[v].end())
    return 0;
  int64_t bytes = 0;
  for (const at::Tensor& t : saved[v].tensors)
    for (const at::Tensor& u : saved[v - 1].tensors)
      if (t.defined() && t.unsafeGetTensorImpl() == u.unsafeGetTensorImpl()) {
        bytes += tensor_bytes(t);
        break;
      }
  return bytes;
}

}  // namespace

CostGraph profile_model(const ModelPlan& plan, const ProfileOptions& options) {
  at::NoGradGuard no_grad;
  const CountingAllocator memory;
  const int n = static_cast<int>(plan.graph.nodes.size());
  ChunkModule module;
  module.begin = 0;
  module.end = n;
  for (int v = 0; v < n; ++v) {
    module.operators.push_back(make_operator(plan.graph, v, plan.shape, plan.seed, plan.dtype));
    module.operators.back()->place(options.device);
  }
  const MicroBatchData data = placed_on({DataSource::synthetic(plan.shape.vocab, plan.seed)
                                             .microbatch(0, 0, plan.microbatch_size, plan.seq_len)},
                                        options.device)[0];
  // One forward to get every operator's inputs and output gradient of the right shape.
  std::vector<at::Tensor> values(n);
  std::vector<Saved> saved(n);
  for (int v = 0; v < n; ++v) {
    std::vector<at::Tensor> in;
    for (int p : plan.inputs[v]) in.push_back(values[p]);
    values[v] = module.op(v).forward(in, data, saved[v]);
  }
  CostGraph graph = plan.graph;
  graph.name += " (measured)";
  graph.time_unit = "ms";
  const Shape& shape = graph.reference;
  for (int v = 0; v < n; ++v) {
    Operator& op = module.op(v);
    std::vector<at::Tensor> in;
    for (int p : plan.inputs[v]) in.push_back(values[p]);
    const at::Tensor grad = at::ones_like(values[v]);
    std::vector<double> f, i, w;
    Saved probe;
    // Transient memory of each pass: its high-water mark above what was live before it and what it
    // leaves behind (the output, what it saved, the gradients it returns).
    int64_t workspace = 0;
    auto transient = [&](auto&& pass) {
      const int64_t before = memory.live();
      memory.reset_peak();
      const auto kept = pass();  // what the pass returns stays alive while we look
      workspace = std::max(workspace, memory.peak() - std::max(before, memory.live()));
      static_cast<void>(kept);
    };
    transient([&] { return op.forward(in, data, probe); });
    transient([&] { return op.backward_input(grad, probe); });
    if (op.has_parameters())
      transient([&] {
        op.backward_weight(grad, probe);
        return 0;
      });
    for (int r = 0; r < options.warmup + options.repeats; ++r) {
      const double tf = time_ms(options.device, [&] { op.forward(in, data, probe); });
      const double ti = time_ms(options.device, [&] { op.backward_input(grad, probe); });
      const double tw = op.has_parameters() ? time_ms(options.device, [&] { op.backward_weight(grad, probe); }) : 0.0;
      if (r < options.warmup) continue;
      f.push_back(tf);
      i.push_back(ti);
      w.push_back(tw);
    }
    OperatorNode& node = graph.nodes[v];
    node.scaling = {ScalingRule::Power, 1, operator_kind(node).quadratic_in_sequence ? 2.0 : 1.0};
    node.forward.time = median(f);
    node.backward_input.time = median(i);
    node.backward_weight.time = median(w);
    node.saved_bytes = rescaled(node.saved_bytes, static_cast<double>(saved[v].bytes()), shape);
    node.shared_saved_bytes =
        rescaled(node.shared_saved_bytes, static_cast<double>(shared_saved_bytes(plan, saved, v)), shape);
    // The executor frees what an operator without parameters saved when I ends; the rest at W.
    node.freed_by_input = op.has_parameters() ? ShapePolynomial{} : node.saved_bytes;
    node.output_bytes = rescaled(node.output_bytes, static_cast<double>(tensor_bytes(values[v])), shape);
    if (options.device.is_cpu())
      node.workspace_bytes = rescaled(node.output_bytes, static_cast<double>(workspace), shape);
  }
  return graph;
}

}  // namespace flexpipe::runtime
