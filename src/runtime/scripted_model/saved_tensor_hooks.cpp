// Saved-tensor hooks for C++: the engine subclass that hands them out, and the slots they fill.
#include "scripted_model/saved_tensor_hooks.h"

#include <algorithm>
#include <map>
#include <tuple>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/saved_variable_hooks.h>

#include "device/device_placement.h"

namespace flexpipe::runtime {

namespace {

thread_local SavedTensors* recording = nullptr;

class SlotHooks final : public torch::autograd::SavedVariableHooks {
 public:
  explicit SlotHooks(std::shared_ptr<SavedTensors::Slot> slot) : slot_(std::move(slot)) {}
  // Detached: a saved output holding its own grad_fn would be a reference cycle.
  void call_pack_hook(const at::Tensor& tensor) override { slot_->value = tensor.detach(); }
  at::Tensor call_unpack_hook() override { return slot_->value; }

 private:
  std::shared_ptr<SavedTensors::Slot> slot_;
};

class RecordingEngine final : public torch::autograd::Engine {
 public:
  RecordingEngine() = default;
  ~RecordingEngine() override { stop(); }
  std::unique_ptr<torch::autograd::SavedVariableHooks> get_default_saved_variable_hooks() override {
    if (recording == nullptr) return nullptr;
    return std::make_unique<SlotHooks>(recording->add());
  }
};

torch::autograd::Engine& recording_engine() {
  static RecordingEngine engine;
  return engine;
}

bool excluded_storage(const at::Tensor& t, const std::vector<const void*>& excluded) {
  return std::find(excluded.begin(), excluded.end(), storage_key(t)) != excluded.end();
}

}  // namespace

std::shared_ptr<SavedTensors::Slot> SavedTensors::add() {
  slots_.push_back(std::make_shared<Slot>());
  return slots_.back();
}

int64_t SavedTensors::bytes(std::vector<const void*>& counted) const {
  int64_t total = 0;
  for (const auto& slot : slots_) {
    const at::Tensor& t = slot->value;
    if (!t.defined() || excluded_storage(t, counted)) continue;
    const void* key = storage_key(t);
    counted.push_back(key);
    total += static_cast<int64_t>(t.storage().nbytes());
  }
  return total;
}

void SavedTensors::move(c10::Device destination, const std::vector<const void*>& excluded) {
  std::map<const void*, at::Tensor> copies;  // original storage -> its copy, whole
  for (const auto& slot : slots_) {
    at::Tensor& t = slot->value;
    if (!t.defined() || excluded_storage(t, excluded)) continue;
    const void* key = storage_key(t);
    auto it = copies.find(key);
    if (it == copies.end()) {
      // The whole storage, so that every view of it keeps its offset and strides in the copy.
      const at::Tensor whole =
          at::empty({0}, t.options()).set_(t.storage(), 0, {static_cast<int64_t>(t.storage().nbytes() / t.itemsize())});
      it = copies.emplace(key, destination.is_cpu() ? host_copy(whole) : device_copy(whole, destination)).first;
    }
    t = at::empty({0}, it->second.options()).set_(it->second.storage(), t.storage_offset(), t.sizes(), t.strides());
  }
}

RecordSavedTensors::RecordSavedTensors(SavedTensors& saved) : previous_(recording) {
  // Installed once, before the first graph that saves anything; no backward is running then.
  static const bool installed = [] {
    torch::autograd::set_default_engine_stub(&recording_engine);
    return true;
  }();
  (void)installed;
  recording = &saved;
}

RecordSavedTensors::~RecordSavedTensors() { recording = previous_; }

}  // namespace flexpipe::runtime
