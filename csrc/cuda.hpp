// cuda.hpp: what the backend needs of CUDA, behind device-generic types so that
// the rest of csrc compiles against a torch without CUDA.
//
// The CUDA path (ProcessGroupNCCL's pattern): an op on CUDA tensors runs on a
// stream of gonccl's own (one per device per backend, from
// goncclStreamAcquire: not one of torch's pool streams, which torch hands out
// round-robin, so another backend or the caller may be using it) that
// first waits on the caller's current stream; the op goes to the C ABI on that
// stream, which runs it on the device path or stages it through pinned host
// memory (GONCCL_DEVICE_PATH, decided per communicator). The backend's
// copy-outs (unflatten, copy back of non-contiguous outputs) follow on the same
// stream, then a torch event is recorded there; Work::wait() makes the caller's
// current stream, whatever it is (the default stream included), wait on that
// event. Stream work stays in issue order: an op with a copy-out holds the next
// op's copies back until the copy-out is queued (goncclRequestHoldStream). The
// caching allocator is told that the gonccl stream uses the tensors
// (recordStream), and the Work keeps them alive until the op has finished.
//
// Everything but support() and opDevice() throws unless the extension was built
// with GONCCL_WITH_CUDA (setup.py decides); without it a CUDA tensor is refused
// before any of them could be called.
#pragma once

#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include "gonccl.h"

namespace gonccl {
namespace cuda {

// True if this extension was built with CUDA support (a compile-time fact).
bool support();

// The one device every tensor of an op lives on: CPU, or one CUDA device.
// Throws ValueError "gonccl: <op>: tensors must all be on CPU or all on CUDA;
// got cpu and cuda:0" for a mix, "...must all be on one CUDA device; got cuda:0
// and cuda:1" for several CUDA devices, and, if cudaBuilt is false, the error
// for a CUDA tensor in a build without CUDA support. Any other device type is
// refused too. No devices: CPU.
c10::Device opDevice(
    const std::vector<c10::Device>& devices,
    const char* op,
    bool cudaBuilt = support());

// The message opDevice throws for a CUDA device when cudaBuilt is false.
std::string noCudaMessage(const char* op);

// A stream of device that only the caller uses (non-blocking; gonccl's own,
// from goncclStreamAcquire, not one of torch's round-robin pool streams, which
// another process group or the user's code may hold too). Give it back with
// releaseStream.
c10::Stream newStream(c10::DeviceIndex device);

// Gives back a stream newStream returned; a later newStream may return it.
void releaseStream(const c10::Stream& stream);

// The calling thread's current stream on device.
c10::Stream currentStream(c10::DeviceIndex device);

// stream's cudaStream_t, as the C ABI takes it. The default stream (whose
// handle is NULL, which the C ABI reads as "host buffers") is given as
// cudaStreamLegacy, which is what NULL means to CUDA.
goncclStream_t handle(const c10::Stream& stream);

// Throws ValueError if gonccl cannot order work after stream (it is under CUDA
// graph capture), before anything is queued: op names the op.
void checkStream(const c10::Stream& stream, const char* op);

// Makes waiter wait (on the GPU) for the work queued on waited so far.
void streamWait(const c10::Stream& waiter, const c10::Stream& waited);

// Tells torch's caching allocator that stream uses t's memory, so the memory is
// not reused before the work queued on stream up to now has finished.
void recordStream(const at::Tensor& t, const c10::Stream& stream);

}  // namespace cuda
}  // namespace gonccl
