// Saved-tensor hooks in C++: every tensor an autograd graph saves while recording lands in a slot,
// the bytes are those of the activations (parameters left out, each storage once), and the backward
// reads the slots, so that a move to host memory and back is what the gradient is computed from.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "scripted_model/saved_tensor_hooks.h"

namespace flexpipe::runtime {
namespace {

struct TanhOfProduct {
  at::Tensor x = at::arange(12, at::kDouble).reshape({3, 4}).div(10).requires_grad_(true);
  at::Tensor w = at::arange(16, at::kDouble).reshape({4, 4}).div(-7).requires_grad_(true);
  at::Tensor y;
  SavedTensors saved;

  void forward(bool record) {
    at::AutoGradMode grad(true);
    if (record) {
      RecordSavedTensors recording(saved);
      y = at::tanh(at::mm(x, w));
    } else {
      y = at::tanh(at::mm(x, w));
    }
  }
  std::vector<at::Tensor> gradients() { return torch::autograd::grad({y.sum()}, {x, w}); }
};

TEST(SavedTensorHooks, CountActivationBytesWithoutParametersEachStorageOnce) {
  TanhOfProduct model;
  model.forward(true);
  // mm saves x and w, tanh its result: x and the result, 12 doubles each, are activations; w is not.
  std::vector<const void*> counted = {storage_key(model.w)};
  EXPECT_EQ(model.saved.bytes(counted), 2 * 12 * 8);
  EXPECT_EQ(model.saved.bytes(counted), 0);  // counted already: a second graph saving them adds nothing
}

TEST(SavedTensorHooks, NothingIsRecordedOutsideTheScope) {
  TanhOfProduct model;
  model.forward(false);
  EXPECT_TRUE(model.saved.empty());
}

TEST(SavedTensorHooks, TheBackwardReadsTheSlotsSoAMovedCopyIsWhatItUses) {
  TanhOfProduct reference;
  reference.forward(false);
  const std::vector<at::Tensor> want = reference.gradients();

  // Without a move the slots alias the inputs: changing x afterwards changes d/dw.
  TanhOfProduct aliased;
  aliased.forward(true);
  {
    at::NoGradGuard no_grad;
    aliased.x.mul_(2);
  }
  EXPECT_FALSE(at::allclose(aliased.gradients()[1], want[1]));

  // Moved out and back, the slots hold copies: the same change leaves the gradient as it was.
  TanhOfProduct moved;
  moved.forward(true);
  moved.saved.move(at::kCPU, {storage_key(moved.w)});  // offload
  moved.saved.move(at::kCPU, {storage_key(moved.w)});  // reload onto the host, the training device here
  {
    at::NoGradGuard no_grad;
    moved.x.mul_(2);
  }
  const std::vector<at::Tensor> got = moved.gradients();
  EXPECT_TRUE(at::equal(got[1], want[1]));
  std::vector<const void*> counted = {storage_key(moved.w), storage_key(moved.x)};
  EXPECT_EQ(moved.saved.bytes(counted), 2 * 12 * 8) << "x's copy is not x's storage";
}

}  // namespace
}  // namespace flexpipe::runtime
