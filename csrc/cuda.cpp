#include "cuda.hpp"

#include <cstdint>

#include <c10/core/Event.h>
#include <c10/util/Exception.h>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "errors.hpp"
#include "library.hpp"

namespace gonccl {
namespace cuda {
bool support() {
#ifdef GONCCL_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::string noCudaMessage(const char* op) {
  return c10::str(
      "gonccl: ",
      op,
      ": CUDA tensors are not supported by this build of gonccl (it was "
      "built without CUDA support, against a torch without CUDA); move the "
      "tensors to the CPU or rebuild gonccl against a CUDA torch");
}

c10::Device opDevice(
    const std::vector<c10::Device>& devices, const char* op, bool cudaBuilt) {
  if (devices.empty()) {
    return c10::Device(c10::kCPU);
  }
  for (const c10::Device& d : devices) {
    if (!d.is_cpu() && !d.is_cuda()) {
      fail<c10::ValueError>(
          op,
          "tensors must be on the CPU or on a CUDA device (got device ",
          d,
          ")");
    }
    if (d.is_cuda() && !cudaBuilt) {
      C10_THROW_ERROR(ValueError, noCudaMessage(op));
    }
  }
  // torch.device("cuda") without an index means the current device; tensors
  // always carry an index, so only a caller of the test hook can pass one.
  const c10::Device first = devices[0];
  for (const c10::Device& d : devices) {
    if (d.is_cpu() != first.is_cpu()) {
      const c10::Device cpu = first.is_cpu() ? first : d;
      const c10::Device gpu = first.is_cpu() ? d : first;
      fail<c10::ValueError>(
          op,
          "tensors must all be on CPU or all on CUDA; got ",
          cpu,
          " and ",
          gpu);
    }
    if (d.is_cuda() && d != first) {
      fail<c10::ValueError>(
          op,
          "tensors must all be on one CUDA device; got ",
          first,
          " and ",
          d,
          " (gonccl runs one op per device: call it once per device)");
    }
  }
  return first;
}

#ifdef GONCCL_WITH_CUDA

// Through the CUDA device guard that torch's c10_cuda registers: no CUDA
// header or library of our own (PyPI's CUDA torch does not ship all of the
// CUDA runtime headers that c10/cuda's headers include).
namespace {

const c10::impl::DeviceGuardImplInterface& guard() {
  return *c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
}

}  // namespace

c10::Stream newStream(c10::DeviceIndex device) {
  const Library& L = lib();
  goncclStream_t h = nullptr;
  const goncclResult_t rc = L.streamAcquire(device, &h);
  if (rc != goncclSuccess) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gonccl: creating its CUDA stream on cuda:",
            static_cast<int>(device),
            " failed: ",
            errorString(rc, L.getLastError(nullptr))));
  }
  // An external stream, as torch.cuda.ExternalStream makes one: c10's CUDA
  // streams take a cudaStream_t (even, being a pointer) as their id.
  return c10::Stream(
      c10::Stream::UNSAFE,
      c10::Device(c10::DeviceType::CUDA, device),
      static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(h)));
}

void releaseStream(const c10::Stream& stream) {
  const goncclResult_t rc =
      lib().streamRelease(static_cast<goncclStream_t>(stream.native_handle()));
  if (rc != goncclSuccess) {
    TORCH_WARN(
        "gonccl: giving back its CUDA stream failed: ",
        errorString(rc, lib().getLastError(nullptr)));
  }
}

c10::Stream currentStream(c10::DeviceIndex device) {
  return guard().getStream(c10::Device(c10::DeviceType::CUDA, device));
}

goncclStream_t handle(const c10::Stream& stream) {
  void* h = stream.native_handle();
  // cudaStreamLegacy: NULL means host buffers to the C ABI.
  return h == nullptr ? reinterpret_cast<goncclStream_t>(0x1)
                      : static_cast<goncclStream_t>(h);
}

void checkStream(const c10::Stream& stream, const char* op) {
  const Library& L = lib();
  // With the stream's device: the calling thread may have no CUDA context
  // current (it never made a CUDA call), where the legacy stream's handle names
  // nothing.
  const goncclResult_t rc = L.streamCheckDevice(
      handle(stream), static_cast<int>(stream.device_index()));
  if (rc != goncclSuccess) {
    fail<c10::ValueError>(op, errorString(rc, L.getLastError(nullptr)));
  }
}

void streamWait(const c10::Stream& waiter, const c10::Stream& waited) {
  if (waiter == waited) {
    return;
  }
  c10::Event event(c10::DeviceType::CUDA);
  event.record(waited);
  event.block(waiter);
}

void recordStream(const at::Tensor& t, const c10::Stream& stream) {
  if (!t.defined() || !t.is_cuda() || !t.has_storage()) {
    return;
  }
  // What tensor.record_stream(stream) does: the caching allocator will not
  // reuse the memory before the work queued on stream so far has finished.
  guard().recordDataPtrOnStream(t.storage().data_ptr(), stream);
}

#else

namespace {

[[noreturn]] void unavailable(const char* what) {
  C10_THROW_ERROR(
      ValueError,
      c10::str(
          "gonccl: ",
          what,
          " needs CUDA support, and this build of gonccl has none (it was "
          "built against a torch without CUDA)"));
}

}  // namespace

c10::Stream newStream(c10::DeviceIndex /*device*/) {
  unavailable("a CUDA stream");
}

void releaseStream(const c10::Stream& /*stream*/) {
  unavailable("a CUDA stream");
}

c10::Stream currentStream(c10::DeviceIndex /*device*/) {
  unavailable("a CUDA stream");
}

goncclStream_t handle(const c10::Stream& /*stream*/) {
  unavailable("a CUDA stream");
}

void checkStream(const c10::Stream& /*stream*/, const char* /*op*/) {
  unavailable("a CUDA stream");
}

void streamWait(const c10::Stream& /*waiter*/, const c10::Stream& /*waited*/) {
  unavailable("a CUDA event");
}

void recordStream(const at::Tensor& /*t*/, const c10::Stream& /*stream*/) {
  unavailable("recordStream");
}

#endif

}  // namespace cuda
}  // namespace gonccl
