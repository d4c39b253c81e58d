// The tensors autograd saves for a backward pass, held where the executor can move them. libtorch's
// public C++ API has no saved-tensor hooks (Python's torch.autograd.graph.saved_tensors_hooks); in C++ the
// autograd engine asks itself for default hooks whenever a graph saves a tensor, so a subclass of the
// engine, installed as the default one, hands out hooks that park every saved tensor in a slot of the
// SavedTensors being recorded on this thread. The executor then counts their bytes, copies them to
// host memory and back (OFFLOAD, RELOAD), and autograd reads them back from the slots in the backward.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace flexpipe::runtime {

class SavedTensors {
 public:
  // Bytes of the storages held that are not in `counted` yet, which it adds them to: seed it with a
  // chunk's parameters (a matrix product saves its weight, which is not an activation) and pass it on
  // across pieces, so that a tensor two graphs save counts once.
  int64_t bytes(std::vector<const void*>& counted) const;
  // Adds the storages held to `to`, each once.
  void add_storages(std::vector<const void*>& to) const { bytes(to); }
  // Copies every slot (but those in `excluded` storages) into separate memory on `destination`: the
  // host for an offload, the training device for a reload; a copy even where the two are one, so that
  // an offload round trip is a real copy. Views of one storage keep sharing one copy.
  void move(c10::Device destination, const std::vector<const void*>& excluded);
  void clear() { slots_.clear(); }
  bool empty() const { return slots_.empty(); }

  struct Slot {
    at::Tensor value;
  };
  std::shared_ptr<Slot> add();

 private:
  std::vector<std::shared_ptr<Slot>> slots_;
};

// While alive, every tensor an autograd graph saves on this thread goes to `saved`.
class RecordSavedTensors {
 public:
  explicit RecordSavedTensors(SavedTensors& saved);
  ~RecordSavedTensors();
  RecordSavedTensors(const RecordSavedTensors&) = delete;
  RecordSavedTensors& operator=(const RecordSavedTensors&) = delete;

 private:
  SavedTensors* previous_;
};

// The storage a tensor's data lives in, as a key.
inline const void* storage_key(const at::Tensor& t) {
  return t.defined() && t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl()) : nullptr;
}

}  // namespace flexpipe::runtime
