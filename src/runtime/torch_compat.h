#pragma once
// Where libtorch's C++ API differs between the generations the runtime builds against (Debian's 1.13,
// and the 2.x of PyTorch's wheels, found with -DTorch_DIR=...), the runtime derives from these
// classes instead of torch's own. Each difference is detected from the headers themselves (a concept
// on torch's class), not from a version number, so that a release that moves one of them is followed
// without a table of versions:
// - c10::Allocator::allocate is const in 1.13 and not in 2.x, where copy_data is pure virtual too;
// - c10d::Store::clone (a thread-safe copy reaching the same store) is pure virtual in recent 2.x and
//   absent before.
#include <cstddef>
#include <cstring>

#include <c10/core/Allocator.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace flexpipe::runtime::compat {

template <typename A>
concept AllocatesFromConst = requires(const A& allocator, size_t bytes) {
  allocator.allocate(bytes);
};
template <typename A>
concept CopiesData = requires(const A& allocator) {
  allocator.copy_data(nullptr, nullptr, size_t{0});
};
template <typename S>
concept Clones = requires(S& store) {
  store.clone();
};

// Where the allocator interface has copy_data, host memory copies with memcpy.
template <typename Base, bool = CopiesData<Base>>
class CopiesHostMemory : public Base {};

template <typename Base>
class CopiesHostMemory<Base, true> : public Base {
 public:
  void copy_data(void* destination, const void* source, size_t bytes) const final {
    if (bytes > 0) std::memcpy(destination, source, bytes);
  }
};

// A host-memory allocator: derived classes implement allocate_bytes (const: the generation whose
// allocate is not const calls it from one).
template <typename Base = c10::Allocator, bool = AllocatesFromConst<Base>>
class HostAllocator : public CopiesHostMemory<Base> {
 public:
  c10::DataPtr allocate(size_t bytes) const final { return allocate_bytes(bytes); }

 protected:
  virtual c10::DataPtr allocate_bytes(size_t bytes) const = 0;
};

template <typename Base>
class HostAllocator<Base, false> : public CopiesHostMemory<Base> {
 public:
  c10::DataPtr allocate(size_t bytes) final { return allocate_bytes(bytes); }

 protected:
  virtual c10::DataPtr allocate_bytes(size_t bytes) const = 0;
};

// A store: derived classes implement clone_store(), a new connection to the same store, which the
// generation with Store::clone calls through it.
template <typename Base = c10d::Store, bool = Clones<Base>>
class Store : public Base {
 public:
  using Base::Base;
  virtual c10::intrusive_ptr<c10d::Store> clone_store() = 0;
};

template <typename Base>
class Store<Base, true> : public Base {
 public:
  using Base::Base;
  virtual c10::intrusive_ptr<c10d::Store> clone_store() = 0;
  c10::intrusive_ptr<c10d::Store> clone() final { return clone_store(); }
};

}  // namespace flexpipe::runtime::compat
