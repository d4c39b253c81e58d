// PrivateUse1 made a device whose tensors live in host memory. Its kernel for every operator gives
// the host's kernel host views of the device's tensors (CPU tensors on the same bytes, no copy) and
// turns what comes back into device tensors again, so the device computes exactly what the CPU does
// while a tensor's device stays visible to the code under test.
#include "host_backed_device.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

namespace flexpipe::test {
namespace {

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
constexpr c10::DispatchKey kDeviceKey = c10::DispatchKey::PrivateUse1;

c10::Device the_device() { return {kDeviceType, 0}; }

bool on_device(const at::Tensor& tensor) { return tensor.defined() && tensor.device().type() == kDeviceType; }

// Registered when the program starts rather than on the first call of host_backed_device(): the
// autograd engine counts each device type's devices once, at the first backward pass of the process,
// and a device it did not count has no queue to run its backward functions on.
C10_REGISTER_GUARD_IMPL(PrivateUse1, c10::impl::NoOpDeviceGuardImpl<c10::DeviceType::PrivateUse1>)

// The context of a DataPtr on another storage's bytes: holding that storage keeps them allocated,
// whichever of the two is freed first.
void release_storage(void* storage) { delete static_cast<c10::Storage*>(storage); }

c10::DataPtr bytes_of(const c10::Storage& owner, c10::Device device) {
  return {owner.unsafeGetStorageImpl()->data_ptr().get(), new c10::Storage(owner), &release_storage, device};
}

// A storage of `device` on the bytes of `owner`. Only a host kernel resizes one (a device storage
// through its host view), which reallocates the storage's own bytes from the host's allocator and
// leaves `owner`'s alone; the device's storages hold the host's allocator too only because a
// resizable storage must have one.
c10::Storage storage_on(const c10::Storage& owner, c10::Device device) {
  return c10::Storage(c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), owner.nbytes(),
                                                            bytes_of(owner, device), c10::GetCPUAllocator(),
                                                            owner.resizable()));
}

at::Tensor tensor_on(c10::Storage storage, c10::DispatchKey key, const at::Tensor& like) {
  at::Tensor tensor =
      at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key), like.dtype());
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  impl->set_sizes_and_strides(like.sizes(), like.strides(), like.storage_offset());
  impl->_set_conj(like.is_conj());
  impl->_set_neg(like.is_neg());
  return tensor;
}

// One call of a host kernel for the device: the host views it is given, and the device tensors that
// what it returns (or does to its arguments) stands for.
class HostCall {
 public:
  c10::IValue to_host(const c10::IValue& value) {
    if (value.isTensor()) return to_host(value.toTensor());
    if (value.isList() && holds_tensors(value.toList())) {
      c10::List<c10::IValue> list = value.toList().copy();  // the caller's list is not ours to change
      for (size_t i = 0; i < list.size(); ++i) list.set(i, to_host(list.get(i)));
      return list;
    }
    if (value.isStorage() && value.toStorage().device_type() == kDeviceType) {
      return host_storage(value.toStorage());
    }
    if (value.isDevice() && value.toDevice().type() == kDeviceType) return c10::Device(c10::DeviceType::CPU);
    if (value.isDevice() && value.toDevice().is_cpu()) host_asked_for_ = true;
    return value;
  }

  at::Tensor to_host(const at::Tensor& tensor) {
    if (!on_device(tensor)) {
      if (tensor.defined() && tensor.has_storage()) host_arguments_.insert(tensor.storage().unsafeGetStorageImpl());
      return tensor;
    }
    // The same tensor, or views of the same storage, given twice stay one tensor or one storage on
    // the host, so that kernels see the overlap they would see on the device.
    for (const Borrowed& borrowed : borrowed_) {
      if (borrowed.device.unsafeGetTensorImpl() == tensor.unsafeGetTensorImpl()) return borrowed.host;
    }
    at::Tensor host = tensor_on(host_storage(tensor.storage()), c10::DispatchKey::CPU, tensor);
    borrowed_.push_back({tensor, host});
    return host;
  }

  c10::IValue to_device(const c10::IValue& value) {
    if (value.isTensor()) return to_device(value.toTensor());
    if (value.isTensorList()) {
      c10::List<at::Tensor> list = value.toTensorList().copy();
      for (size_t i = 0; i < list.size(); ++i) list.set(i, to_device(list.get(i)));
      return list;
    }
    return value;
  }

  // Host views given back become their device tensors, views of them views of the same device
  // storage; new host tensors move to the device, unless the operator was asked for a host tensor or
  // returned (a view of) one of its host arguments.
  at::Tensor to_device(const at::Tensor& result) {
    if (!result.defined() || !result.is_cpu() || !result.has_storage()) return result;
    for (const Borrowed& borrowed : borrowed_) {
      if (borrowed.host.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) return borrowed.device;
    }
    const c10::StorageImpl* storage = result.storage().unsafeGetStorageImpl();
    if (!lenders_.count(storage) && (host_asked_for_ || host_arguments_.count(storage))) return result;
    return tensor_on(device_storage(result.storage()), kDeviceKey, result);
  }

  // An out= or in-place argument that the host kernel resized, reallocated or set to other storage
  // has its device tensor changed alike; a reallocated storage is changed in place, as the device's
  // own resize would, so that other views of it see the new bytes too.
  void write_back() {
    for (const Borrowed& borrowed : borrowed_) {
      const c10::Storage& host = borrowed.host.storage();
      const auto lender = lenders_.find(host.unsafeGetStorageImpl());
      if (lender != lenders_.end() &&
          (lender->second.nbytes() != host.nbytes() ||
           lender->second.unsafeGetStorageImpl()->data_ptr().get() != host.unsafeGetStorageImpl()->data_ptr().get())) {
        c10::StorageImpl* reallocated = lender->second.unsafeGetStorageImpl();
        reallocated->set_data_ptr_noswap(bytes_of(host, the_device()));
        reallocated->set_nbytes(host.nbytes());
      }
      c10::TensorImpl* device = borrowed.device.unsafeGetTensorImpl();
      c10::Storage storage = device_storage(host);
      if (storage.unsafeGetStorageImpl() != device->storage().unsafeGetStorageImpl()) {
        device->set_storage_keep_dtype(std::move(storage));
      }
      if (device->sizes() != borrowed.host.sizes() || device->strides() != borrowed.host.strides() ||
          device->storage_offset() != borrowed.host.storage_offset()) {
        device->set_sizes_and_strides(borrowed.host.sizes(), borrowed.host.strides(), borrowed.host.storage_offset());
      }
    }
  }

 private:
  struct Borrowed {
    at::Tensor device;
    at::Tensor host;
  };

  static bool holds_tensors(const c10::List<c10::IValue>& list) {
    for (const c10::IValue& element : list) {
      if (element.isTensor()) return true;
    }
    return false;
  }

  c10::Storage host_storage(const c10::Storage& device) {
    auto [host, fresh] = hosts_.try_emplace(device.unsafeGetStorageImpl());
    if (fresh) {
      host->second = storage_on(device, c10::Device(c10::DeviceType::CPU));
      lenders_.emplace(host->second.unsafeGetStorageImpl(), device);
    }
    return host->second;
  }

  c10::Storage device_storage(const c10::Storage& host) {
    const auto lender = lenders_.find(host.unsafeGetStorageImpl());
    if (lender != lenders_.end()) return lender->second;
    return storage_on(host, the_device());
  }

  std::vector<Borrowed> borrowed_;
  std::unordered_map<const c10::StorageImpl*, c10::Storage> hosts_;    // device storage: its host view's
  std::unordered_map<const c10::StorageImpl*, c10::Storage> lenders_;  // host view's storage: the device's
  std::unordered_set<const c10::StorageImpl*> host_arguments_;
  bool host_asked_for_ = false;  // a device argument named the host
};

template <typename Visit>
void for_each_tensor(const c10::IValue& value, Visit&& visit) {
  if (value.isTensor()) visit(value.toTensor());
  if (value.isList()) {
    for (const c10::IValue& element : value.toList()) for_each_tensor(element, visit);
  }
}

// Operators whose CUDA kernels accept host tensors of any shape beside device ones (their index
// tensors); everywhere else only a host scalar (a tensor of no dimensions) may join device tensors.
bool mixes_devices(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> mixing = {"aten::index", "aten::index_put", "aten::index_put_",
                                                         "aten::_index_put_impl", "aten::_index_put_impl_"};
  return mixing.count(name.name) > 0;
}

void check_one_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> arguments) {
  if (mixes_devices(op.operator_name())) return;
  bool device_seen = false;
  const c10::Argument* host_argument = nullptr;
  for (size_t i = 0; i < arguments.size(); ++i) {
    for_each_tensor(arguments[i], [&](const at::Tensor& tensor) {
      if (on_device(tensor)) device_seen = true;
      if (tensor.defined() && tensor.is_cpu() && tensor.dim() > 0 && host_argument == nullptr) {
        host_argument = &op.schema().arguments()[i];
      }
    });
  }
  TORCH_CHECK(!device_seen || host_argument == nullptr,
              "Expected all tensors to be on the same device, but found at least two devices, ", the_device(),
              " and cpu! (when checking argument for argument ", host_argument->name(), " in method ",
              op.operator_name(), ")");
}

void run_on_host(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto arguments = stack->end() - static_cast<std::ptrdiff_t>(schema.arguments().size());
  check_one_device(op, c10::ArrayRef<c10::IValue>(&*arguments, schema.arguments().size()));
  HostCall call;
  for (auto argument = arguments; argument != stack->end(); ++argument) *argument = call.to_host(*argument);
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
  call.write_back();
  const auto results = stack->end() - static_cast<std::ptrdiff_t>(schema.returns().size());
  for (auto result = results; result != stack->end(); ++result) *result = call.to_device(*result);
}

// Copies between the devices are what the device exists to check, so copy_ (unlike other operators)
// takes tensors of both. It needs a kernel of its own besides: its one kernel for every device
// (CompositeExplicitAutograd) hands a copy that involves a device libtorch does not know to
// aten::_copy_from, for which the host has no kernel.
at::Tensor& copy_between(at::Tensor& self, const at::Tensor& source, bool non_blocking) {
  HostCall call;
  call.to_host(self).copy_(call.to_host(source), non_blocking);
  return self;
}

// Module::to moves a parameter between devices with set_data, which first asks whether the tensors
// may take each other's places: libtorch's answer names the dense tensors of its own devices only.
bool may_swap_data(const at::Tensor& self, const at::Tensor& from) {
  const auto dense_here = [](c10::DispatchKeySet keys) {
    return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) &&
           keys.has_any(c10::DispatchKeySet({c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit}));
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
         (dense_here(self.key_set()) && dense_here(from.key_set()));
}

// Operators with one kernel for every device (CompositeExplicitAutograd, which includes the
// functional forms of structured operators) would run it on device tensors, where it need not compute
// what the host's own kernel does (layer_norm's gradients then differ from the host's in their last
// bits) and may reach a DispatchStub, which knows only libtorch's own devices. Run on host views, they
// take the host's path as every other operator does. _to_copy keeps its own: it makes the
// destination on the device asked for and copies into it, which is the transfer under test.
void run_composites_on_host(std::vector<std::unique_ptr<torch::Library>>& libraries) {
  static const std::unordered_set<std::string> keep_own = {"aten::_to_copy", "aten::copy_"};
  std::unordered_map<std::string, torch::Library*> by_namespace;
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    const c10::optional<c10::OperatorHandle> op = c10::Dispatcher::singleton().findOp(name);
    if (!op || keep_own.count(name.name) || op->hasKernelForDispatchKey(kDeviceKey)) continue;
    if (!op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutograd) &&
        !op->hasKernelForDispatchKey(c10::DispatchKey::CompositeExplicitAutogradNonFunctional)) {
      continue;
    }
    const std::string ns = name.name.substr(0, name.name.find("::"));
    torch::Library*& library = by_namespace[ns];
    if (library == nullptr) {
      libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, ns, kDeviceKey, __FILE__, __LINE__));
      library = libraries.back().get();
    }
    const std::string full_name = name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
    library->impl(full_name.c_str(), torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  }
}

// Kept for the life of the program: a library's registrations end with it.
std::vector<std::unique_ptr<torch::Library>> register_kernels() {
  std::vector<std::unique_ptr<torch::Library>> libraries;
  libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "_", kDeviceKey, __FILE__, __LINE__));
  libraries.back()->fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_host>());
  libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", kDeviceKey, __FILE__, __LINE__));
  libraries.back()->impl("copy_", TORCH_FN(copy_between));
  libraries.back()->impl("_has_compatible_shallow_copy_type", TORCH_FN(may_swap_data));
  // Its only kernel was CompositeImplicitAutograd, which the one above displaces on the device's
  // autograd key too, and no autograd fallback of libtorch 1.13 covers that key.
  libraries.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                       c10::DispatchKey::AutogradPrivateUse1, __FILE__, __LINE__));
  libraries.back()->impl("_has_compatible_shallow_copy_type", TORCH_FN(may_swap_data));
  run_composites_on_host(libraries);
  return libraries;
}

}  // namespace

c10::Device host_backed_device() {
  // On the first call rather than at static initialization, so that every operator libtorch defines
  // has been registered when the composite ones are found.
  static const std::vector<std::unique_ptr<torch::Library>> kernels = register_kernels();
  return the_device();
}

}  // namespace flexpipe::test
