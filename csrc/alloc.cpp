// alloc.cpp: backend-allocated CPU tensors. allocate_tensor (and the
// allocator torch gets from getMemAllocator) hands out gonccl's shared memory:
// a memfd mapped MAP_SHARED that stays open while the tensor lives
// (goncclMemAlloc), so ranks on this host can map each other's tensors.
#include <memory>
#include <string>

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

constexpr const char* kWhat = "allocate_tensor";

// Frees a goncclMemAlloc pointer; a failure can only be reported, as a deleter
// must not throw.
void freeShared(void* ptr) {
  if (ptr == nullptr || isForkedChild()) {
    return;  // a fork's copy of the mapping goes with the process
  }
  goncclResult_t rc = lib().memFree(ptr);
  if (rc != goncclSuccess) {
    TORCH_WARN(
        "gonccl: freeing shared memory failed: ",
        errorString(rc, lib().getLastError(nullptr)));
  }
}

class SharedMemoryAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    if (n == 0) {
      return {nullptr, nullptr, &freeShared, c10::Device(c10::kCPU)};
    }
    void* ptr = nullptr;
    goncclResult_t rc = lib().memAlloc(&ptr, n);
    if (rc != goncclSuccess) {
      fail<c10::DistBackendError>(
          kWhat,
          "allocating ",
          n,
          " bytes of shared memory failed: ",
          errorString(rc, lib().getLastError(nullptr)));
    }
    return {ptr, ptr, &freeShared, c10::Device(c10::kCPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return &freeShared;
  }
  void copy_data(
      void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

}  // namespace

bool GoncclBackend::supportsTensorAlloc(c10::DeviceIndex deviceIdx) {
  // torch passes the device's index: -1 for the CPU. CUDA tensors are not
  // allocated by gonccl.
  return deviceIdx < 0;
}

std::shared_ptr<c10::Allocator> GoncclBackend::getMemAllocator() {
  liveComm("mem_allocator");
  static auto allocator = std::make_shared<SharedMemoryAllocator>();
  return allocator;
}

at::Tensor GoncclBackend::allocateTensor(long size, at::TensorOptions options) {
  if (options.device().type() != c10::kCPU) {
    fail<c10::ValueError>(
        kWhat,
        "gonccl allocates CPU tensors only (in its shared memory); got device ",
        options.device().str());
  }
  if (size < 0) {
    fail<c10::ValueError>(kWhat, "size must be >= 0, got ", size);
  }
  std::shared_ptr<c10::Allocator> allocator = getMemAllocator();
  const size_t bytes = static_cast<size_t>(size) *
                       c10::elementSize(options.dtype().toScalarType());
  c10::Storage storage(
      c10::Storage::use_byte_size_t(),
      bytes,
      allocator->allocate(bytes),
      allocator.get(),
      /*resizable=*/false);
  return at::empty({0}, options).set_(storage, 0, {size}, {1});
}

}  // namespace gonccl
