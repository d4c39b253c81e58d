// The adapter over libtorch's generations: each difference is found from the class itself, and the
// runtime's allocator and store work through torch's base classes whichever the generation.
#include <cstring>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <torch/version.h>

#include "torch_compat.h"

namespace flexpipe::runtime {
namespace {

// The shapes of the interfaces in the 2.x generation, as far as the adapter is concerned.
struct AllocatorOf2x {
  virtual ~AllocatorOf2x() = default;
  virtual c10::DataPtr allocate(size_t bytes) = 0;
  virtual void copy_data(void* destination, const void* source, size_t bytes) const = 0;
};
struct StoreOf2x {
  virtual ~StoreOf2x() = default;
  virtual c10::intrusive_ptr<c10d::Store> clone() = 0;
};

static_assert(!compat::AllocatesFromConst<AllocatorOf2x> && compat::CopiesData<AllocatorOf2x>);
static_assert(compat::Clones<StoreOf2x>);
#if TORCH_VERSION_MAJOR == 1
// Debian's 1.13: allocate is const, nothing to copy with, no clone.
static_assert(compat::AllocatesFromConst<c10::Allocator> && !compat::CopiesData<c10::Allocator>);
static_assert(!compat::Clones<c10d::Store>);
#endif

// Hands out blocks of the CPU allocator and counts them.
template <typename Base>
class Counting final : public compat::HostAllocator<Base> {
 public:
  mutable int calls = 0;

 protected:
  c10::DataPtr allocate_bytes(size_t bytes) const override {
    ++calls;
    return c10::GetCPUAllocator()->allocate(bytes);
  }
};

TEST(TorchCompat, AnAllocatorOfThisLibtorchAllocatesThroughTorchsInterface) {
  Counting<c10::Allocator> counting;
  c10::Allocator& allocator = counting;
  const c10::DataPtr block = allocator.allocate(64);
  ASSERT_NE(block.get(), nullptr);
  EXPECT_EQ(counting.calls, 1);
  // Storage on it: torch's own code calls the allocator.
  c10::Storage storage(c10::Storage::use_byte_size_t(), 64, &allocator, false);
  EXPECT_EQ(counting.calls, 2);
  EXPECT_NE(storage.data(), nullptr);
}

TEST(TorchCompat, AnAllocatorOfThe2xShapeAllocatesAndCopies) {
  Counting<AllocatorOf2x> counting;
  AllocatorOf2x& allocator = counting;
  c10::DataPtr from = allocator.allocate(8);
  c10::DataPtr to = allocator.allocate(8);
  EXPECT_EQ(counting.calls, 2);
  std::memcpy(from.get(), "flexpipe", 8);
  allocator.copy_data(to.get(), from.get(), 8);
  EXPECT_EQ(std::memcmp(to.get(), "flexpipe", 8), 0);
  allocator.copy_data(nullptr, nullptr, 0);  // an empty copy touches nothing
}

class Cloning final : public compat::Store<StoreOf2x> {
 public:
  int clones = 0;
  c10::intrusive_ptr<c10d::Store> clone_store() override {
    ++clones;
    return {};
  }
};

TEST(TorchCompat, AStoreOfThe2xShapeClonesThroughCloneStore) {
  Cloning cloning;
  StoreOf2x& store = cloning;
  EXPECT_FALSE(store.clone().defined());
  EXPECT_EQ(cloning.clones, 1);
}

}  // namespace
}  // namespace flexpipe::runtime
