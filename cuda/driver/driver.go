package driver

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

// The driver entry points gonccl uses, resolved by name with dlsym. The names are the
// ones libcuda exports (cuda.h maps e.g. cuMemcpyDtoHAsync to cuMemcpyDtoHAsync_v2).
typedef struct {
  CUresult (*Init)(unsigned int);
  CUresult (*GetErrorName)(CUresult, const char**);
  CUresult (*StreamGetCtx)(CUstream, CUcontext*);
  CUresult (*CtxGetCurrent)(CUcontext*);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*PointerGetAttribute)(void*, int, CUdeviceptr);
  CUresult (*MemHostAlloc)(void**, size_t, unsigned int);
  CUresult (*MemFreeHost)(void*);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*EventCreate)(CUevent*, unsigned int);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventQuery)(CUevent);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned int);
  CUresult (*StreamIsCapturing)(CUstream, int*);
  CUresult (*CtxGetDevice)(int*);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, int);
  CUresult (*DevicePrimaryCtxRelease)(int);
  CUresult (*StreamCreate)(CUstream*, unsigned int);
  // module loading and kernel launch
  CUresult (*ModuleLoadData)(void**, const void*);
  CUresult (*ModuleUnload)(void*);
  CUresult (*ModuleGetFunction)(void**, void*, const char*);
  CUresult (*LaunchKernel)(void*, unsigned int, unsigned int, unsigned int, unsigned int, unsigned int,
                           unsigned int, unsigned int, CUstream, void**, void**);
  // device memory, IPC and stream memory operations
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*IpcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*IpcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned int);
  CUresult (*IpcCloseMemHandle)(CUdeviceptr);
  CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*StreamWaitValue32)(CUstream, CUdeviceptr, unsigned int, unsigned int);
  CUresult (*StreamWriteValue32)(CUstream, CUdeviceptr, unsigned int, unsigned int);
  CUresult (*DeviceCanAccessPeer)(int*, int, int);
  CUresult (*DeviceGetPCIBusId)(char*, int, int);
  CUresult (*StreamDestroy)(CUstream);
  CUresult (*ThreadExchangeStreamCaptureMode)(int*);
  CUresult (*MemHostRegister)(void*, size_t, unsigned int);
  CUresult (*MemHostUnregister)(void*);
  CUresult (*MemHostGetDevicePointer)(CUdeviceptr*, void*, unsigned int);
} gcFns;

static const char* gcSymbols[] = {
  "cuInit", "cuGetErrorName", "cuStreamGetCtx", "cuCtxGetCurrent", "cuCtxSetCurrent",
  "cuPointerGetAttribute", "cuMemHostAlloc", "cuMemFreeHost", "cuMemcpyDtoHAsync_v2",
  "cuMemcpyHtoDAsync_v2", "cuEventCreate", "cuEventRecord", "cuEventQuery",
  "cuEventDestroy_v2", "cuStreamWaitEvent", "cuStreamIsCapturing", "cuCtxGetDevice",
  "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease_v2", "cuStreamCreate",
  // module loading and kernel launch
  "cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel",
  // device memory, IPC and stream memory operations
  "cuMemAlloc_v2", "cuMemFree_v2", "cuIpcGetMemHandle",
  "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle", "cuMemcpyDtoDAsync_v2", "cuStreamWaitValue32_v2",
  "cuStreamWriteValue32_v2", "cuDeviceCanAccessPeer",
  "cuDeviceGetPCIBusId", "cuStreamDestroy_v2",
  // graph capture: gonccl's calls never invalidate a user's capture
  "cuThreadExchangeStreamCaptureMode",
  // the device path's flags: host memory the GPU maps (cuda/hostflags.go)
  "cuMemHostRegister_v2", "cuMemHostUnregister", "cuMemHostGetDevicePointer_v2",
};

_Static_assert(sizeof(gcFns) == sizeof(gcSymbols) / sizeof(gcSymbols[0]) * sizeof(void*),
               "gcFns and gcSymbols must list the same entry points, in the same order");

// The entry points up to cuStreamCreate are the staged path's, which every CUDA
// driver has: a missing one fails the load. The others belong to paths the default
// path never takes (the kernels, the device and same-GPU paths, IPC, the device path's
// flags) or are optional (the capture mode exchange): a missing one leaves its slot NULL,
// and calling it fails with gcMissing, naming the entry point, without disabling CUDA.
#define GC_REQUIRED 20
#define gcMissing (-1)

// gcOpen dlopens path and fills *f. On failure it returns a malloc'd message.
static char* gcOpen(const char* path, gcFns* f, void** handle) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char* e = dlerror();
    return strdup(e ? e : "dlopen failed");
  }
  void** slots = (void**)f;
  for (size_t i = 0; i < sizeof(gcSymbols) / sizeof(gcSymbols[0]); i++) {
    dlerror();
    slots[i] = dlsym(h, gcSymbols[i]);
    if (slots[i] == NULL && i >= GC_REQUIRED) {
      continue;
    }
    if (slots[i] == NULL) {
      const char* e = dlerror();
      char* msg = strdup(e ? e : gcSymbols[i]);
      dlclose(h);
      return msg;
    }
  }
  *handle = h;
  return NULL;
}

#include <stdint.h>
#define H(x) ((void*)(x))
static CUresult gcInit(gcFns* f) { return f->Init(0); }
static const char* gcErrorName(gcFns* f, CUresult r) {
  const char* s = NULL;
  if (f->GetErrorName(r, &s) != 0) return NULL;
  return s;
}
static CUresult gcStreamGetCtx(gcFns* f, uintptr_t s, uintptr_t* c) {
  CUcontext ctx = NULL;
  CUresult r = f->StreamGetCtx(H(s), &ctx);
  *c = (uintptr_t)ctx;
  return r;
}
static CUresult gcCtxGetCurrent(gcFns* f, uintptr_t* c) {
  CUcontext ctx = NULL;
  CUresult r = f->CtxGetCurrent(&ctx);
  *c = (uintptr_t)ctx;
  return r;
}
static CUresult gcCtxSetCurrent(gcFns* f, uintptr_t c) { return f->CtxSetCurrent(H(c)); }
static CUresult gcPointerDevice(gcFns* f, int* ord, uintptr_t p) {
  return f->PointerGetAttribute(ord, 9, (CUdeviceptr)p); // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
}
static CUresult gcMemHostAlloc(gcFns* f, void** p, size_t n, unsigned int flags) {
  return f->MemHostAlloc(p, n, flags);
}
static CUresult gcMemFreeHost(gcFns* f, void* p) { return f->MemFreeHost(p); }
static CUresult gcMemcpyDtoHAsync(gcFns* f, void* dst, uintptr_t src, size_t n, uintptr_t s) {
  return f->MemcpyDtoHAsync(dst, (CUdeviceptr)src, n, H(s));
}
static CUresult gcMemcpyHtoDAsync(gcFns* f, uintptr_t dst, void* src, size_t n, uintptr_t s) {
  return f->MemcpyHtoDAsync((CUdeviceptr)dst, src, n, H(s));
}
static CUresult gcEventCreate(gcFns* f, uintptr_t* e) {
  CUevent ev = NULL;
  CUresult r = f->EventCreate(&ev, 0x2); // CU_EVENT_DISABLE_TIMING
  *e = (uintptr_t)ev;
  return r;
}
static CUresult gcEventRecord(gcFns* f, uintptr_t e, uintptr_t s) { return f->EventRecord(H(e), H(s)); }
static CUresult gcEventQuery(gcFns* f, uintptr_t e) { return f->EventQuery(H(e)); }
static CUresult gcEventDestroy(gcFns* f, uintptr_t e) { return f->EventDestroy(H(e)); }
static CUresult gcStreamIsCapturing(gcFns* f, uintptr_t s, int* status) { return f->StreamIsCapturing(H(s), status); }
static CUresult gcCtxGetDevice(gcFns* f, int* dev) { return f->CtxGetDevice(dev); }
static CUresult gcPrimaryRetain(gcFns* f, int dev, uintptr_t* c) {
  CUcontext ctx = NULL;
  CUresult r = f->DevicePrimaryCtxRetain(&ctx, dev);
  *c = (uintptr_t)ctx;
  return r;
}
static CUresult gcPrimaryRelease(gcFns* f, int dev) { return f->DevicePrimaryCtxRelease(dev); }
static CUresult gcStreamWaitEvent(gcFns* f, uintptr_t s, uintptr_t e) { return f->StreamWaitEvent(H(s), H(e), 0); }
static CUresult gcStreamCreate(gcFns* f, uintptr_t* s) {
  CUstream st = NULL;
  CUresult r = f->StreamCreate(&st, 0x1); // CU_STREAM_NON_BLOCKING
  *s = (uintptr_t)st;
  return r;
}
static CUresult gcStreamDestroy(gcFns* f, uintptr_t s) {
  if (f->StreamDestroy == NULL) return gcMissing;
  return f->StreamDestroy(H(s));
}
static CUresult gcThreadExchangeCaptureMode(gcFns* f, int* mode) {
  if (f->ThreadExchangeStreamCaptureMode == NULL) return gcMissing;
  return f->ThreadExchangeStreamCaptureMode(mode);
}
static CUresult gcMemHostRegister(gcFns* f, void* p, size_t n, unsigned int flags) {
  if (f->MemHostRegister == NULL) return gcMissing;
  return f->MemHostRegister(p, n, flags);
}
static CUresult gcMemHostUnregister(gcFns* f, void* p) {
  if (f->MemHostUnregister == NULL) return gcMissing;
  return f->MemHostUnregister(p);
}
static CUresult gcMemHostGetDevicePointer(gcFns* f, uintptr_t* out, void* p) {
  if (f->MemHostGetDevicePointer == NULL) return gcMissing;
  CUdeviceptr d = 0;
  CUresult r = f->MemHostGetDevicePointer(&d, p, 0);
  *out = (uintptr_t)d;
  return r;
}
// device memory, IPC and stream memory operations
static CUresult gcMemAlloc(gcFns* f, uintptr_t* p, size_t n) {
  if (f->MemAlloc == NULL) return gcMissing;
  CUdeviceptr d = 0;
  CUresult r = f->MemAlloc(&d, n);
  *p = (uintptr_t)d;
  return r;
}
static CUresult gcMemFree(gcFns* f, uintptr_t p) {
  if (f->MemFree == NULL) return gcMissing;
  return f->MemFree((CUdeviceptr)p);
}
static CUresult gcIpcGetMemHandle(gcFns* f, void* h, uintptr_t p) {
  if (f->IpcGetMemHandle == NULL) return gcMissing;
  return f->IpcGetMemHandle((CUipcMemHandle*)h, (CUdeviceptr)p);
}
static CUresult gcIpcOpenMemHandle(gcFns* f, uintptr_t* p, void* h) {
  if (f->IpcOpenMemHandle == NULL) return gcMissing;
  CUipcMemHandle handle;
  memcpy(&handle, h, sizeof handle);
  CUdeviceptr d = 0;
  CUresult r = f->IpcOpenMemHandle(&d, handle, 0x1); // CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
  *p = (uintptr_t)d;
  return r;
}
static CUresult gcIpcCloseMemHandle(gcFns* f, uintptr_t p) {
  if (f->IpcCloseMemHandle == NULL) return gcMissing;
  return f->IpcCloseMemHandle((CUdeviceptr)p);
}
static CUresult gcMemcpyDtoDAsync(gcFns* f, uintptr_t dst, uintptr_t src, size_t n, uintptr_t s) {
  if (f->MemcpyDtoDAsync == NULL) return gcMissing;
  return f->MemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, H(s));
}
static CUresult gcStreamWaitValue32(gcFns* f, uintptr_t s, uintptr_t p, unsigned v, unsigned flags) {
  if (f->StreamWaitValue32 == NULL) return gcMissing;
  return f->StreamWaitValue32(H(s), (CUdeviceptr)p, v, flags);
}
static CUresult gcStreamWriteValue32(gcFns* f, uintptr_t s, uintptr_t p, unsigned v) {
  if (f->StreamWriteValue32 == NULL) return gcMissing;
  return f->StreamWriteValue32(H(s), (CUdeviceptr)p, v, 0); // with the memory barrier
}
static CUresult gcDeviceCanAccessPeer(gcFns* f, int* can, int dev, int peer) {
  if (f->DeviceCanAccessPeer == NULL) return gcMissing;
  return f->DeviceCanAccessPeer(can, dev, peer);
}
static CUresult gcDeviceGetPCIBusId(gcFns* f, char* id, int n, int dev) {
  if (f->DeviceGetPCIBusId == NULL) return gcMissing;
  return f->DeviceGetPCIBusId(id, n, dev);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gonccl/gonccl/internal/cenv"
)

// DefaultLibrary is the library Default loads unless GONCCL_CUDA_LIBRARY names another.
const DefaultLibrary = "libcuda.so.1"

// ErrUnavailable means CUDA could not be loaded or initialised on this machine. It is
// the normal state of a machine without a GPU, not a failure of gonccl.
var ErrUnavailable = errors.New("CUDA is not available")

// Driver result codes gonccl acts on.
const (
	resultSuccess  = 0
	resultMissing  = -1  // gcMissing: an optional entry point the driver does not have
	resultNotReady = 600 // CUDA_ERROR_NOT_READY: an event or stream has work pending
	// A query a capture forbade (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, _INVALIDATED,
	// _IMPLICIT): the event has not been seen done, which is all it says.
	resultCaptureUnsupported = 900
	resultCaptureInvalidated = 901
	resultCaptureImplicit    = 906
	// captureModeRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED: a thread in it never
	// invalidates another thread's capture.
	captureModeRelaxed = 2
)

// hostAllocPortable is CU_MEMHOSTALLOC_PORTABLE: pinned memory usable from every context.
const hostAllocPortable = 0x1

// Error is a failed driver call: the function and the CUDA error's name.
type Error struct {
	Func string // the driver entry point, e.g. "cuMemcpyDtoHAsync"
	What string // optional detail, e.g. which buffer
	Code int    // the CUresult
	Name string // cuGetErrorName's name for Code, e.g. "CUDA_ERROR_INVALID_VALUE"
}

func (e *Error) Error() string {
	if e.What != "" {
		return fmt.Sprintf("cuda: %s (%s): %s", e.Func, e.What, e.Name)
	}
	return fmt.Sprintf("cuda: %s: %s", e.Func, e.Name)
}

// Driver is a loaded CUDA driver library.
type Driver struct {
	path string
	fns  *C.gcFns // C memory: the function table
}

// Open loads the driver library at path (a file name or path, as for dlopen), resolves
// every entry point gonccl uses and initialises the driver. Any failure wraps
// ErrUnavailable and says why.
func Open(path string) (*Driver, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	fns := (*C.gcFns)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gcFns{}))))
	var handle unsafe.Pointer
	if msg := C.gcOpen(cpath, fns, &handle); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		C.free(unsafe.Pointer(fns))
		return nil, fmt.Errorf("%w: loading %s: %s", ErrUnavailable, path, C.GoString(msg))
	}
	d := &Driver{path: path, fns: fns}
	if err := d.check("cuInit", C.gcInit(fns)); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, path, err)
	}
	return d, nil
}

// KernelEntries are the driver's module and launch entry points (cuModuleLoadData,
// cuModuleUnload, cuModuleGetFunction, cuLaunchKernel), for the kernels package's own cgo
// calls: it loads and launches, the driver package only resolves them.
type KernelEntries struct {
	ModuleLoadData, ModuleUnload, ModuleGetFunction, LaunchKernel unsafe.Pointer
}

// MissingEntry is the result code the Check of an entry point the driver does not have
// reports (optional ones only: see gcOpen).
const MissingEntry = resultMissing

// Kernels returns the entry points the kernels package calls (nil where the driver
// has none).
func (d *Driver) Kernels() KernelEntries {
	return KernelEntries{
		ModuleLoadData:    unsafe.Pointer(d.fns.ModuleLoadData),
		ModuleUnload:      unsafe.Pointer(d.fns.ModuleUnload),
		ModuleGetFunction: unsafe.Pointer(d.fns.ModuleGetFunction),
		LaunchKernel:      unsafe.Pointer(d.fns.LaunchKernel),
	}
}

// Path is the library the driver was loaded from.
func (d *Driver) Path() string { return d.path }

var defaultDriver struct {
	once sync.Once
	d    *Driver
	err  error
}

// Default returns the process's driver, loading it on first use from
// GONCCL_CUDA_LIBRARY, else libcuda.so.1. Whether CUDA is available is decided once
// per process and logged at INFO (GONCCL_DEBUG=INFO); its absence is not an error
// until someone gives gonccl a stream.
func Default() (*Driver, error) {
	defaultDriver.once.Do(func() {
		path := DefaultLibrary
		if v, ok := cenv.Lookup("GONCCL_CUDA_LIBRARY"); ok && v != "" {
			path = v
		}
		defaultDriver.d, defaultDriver.err = Open(path)
		if defaultDriver.err != nil {
			LogInfo(fmt.Sprintf("CUDA unavailable (device buffers will be refused): %v", defaultDriver.err))
		} else {
			LogInfo(fmt.Sprintf("CUDA driver loaded from %s", path))
		}
	})
	return defaultDriver.d, defaultDriver.err
}

// check turns a CUresult into nil or an *Error naming fn and the CUDA error.
func (d *Driver) check(fn string, r C.CUresult) error { return d.Check(fn, int(r)) }

// Check turns a CUresult code into nil or an *Error naming fn and the CUDA error. The
// kernels package checks its own launches with it.
func (d *Driver) Check(fn string, r int) error {
	if r == resultSuccess {
		return nil
	}
	if r == resultMissing {
		return &Error{Func: fn, Code: r, Name: "not in this CUDA driver (too old?): only the paths that need it are unavailable"}
	}
	return &Error{Func: fn, Code: int(r), Name: d.errorName(C.CUresult(r))}
}

func (d *Driver) errorName(r C.CUresult) string {
	if s := C.gcErrorName(d.fns, r); s != nil {
		return C.GoString(s)
	}
	return fmt.Sprintf("CUDA error %d", int(r))
}

// Context is a CUcontext.
type Context uintptr

// Stream is a CUstream (the same handle as the runtime's cudaStream_t).
type Stream uintptr

// Event is a CUevent.
type Event uintptr

// Do runs f on this goroutine's OS thread with ctx current, then restores the thread's
// previous context. ctx 0 leaves the current context as it is.
func (d *Driver) Do(ctx Context, f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if ctx == 0 {
		return f()
	}
	var old C.uintptr_t
	if err := d.check("cuCtxGetCurrent", C.gcCtxGetCurrent(d.fns, &old)); err != nil {
		return err
	}
	if uintptr(old) != uintptr(ctx) {
		if err := d.check("cuCtxSetCurrent", C.gcCtxSetCurrent(d.fns, C.uintptr_t(ctx))); err != nil {
			return err
		}
		defer C.gcCtxSetCurrent(d.fns, old)
	}
	return f()
}

// DoRelaxed is Do with the thread in relaxed capture mode for f (see relaxed), for
// calls other than the wrappers below that the driver may refuse during another
// thread's global-mode capture (loading a module), and for loops of event queries
// (EventDoneRelaxed).
func (d *Driver) DoRelaxed(ctx Context, f func() error) error {
	var err error
	r := d.relaxed(func() C.CUresult {
		err = d.Do(ctx, f)
		return resultSuccess
	})
	if err == nil {
		err = d.check("cuThreadExchangeStreamCaptureMode", r)
	}
	return err
}

// relaxed makes call, one of the driver's "potentially unsafe" calls during
// a stream capture (an event query, an allocation or a free), with the calling thread
// in relaxed capture mode, then restores the thread's own mode: in the thread's default
// (global) mode it would fail and invalidate a graph a user thread is capturing in
// global mode (torch.cuda.graph's default). Only these calls pay for the exchange
// (TestGlobalCaptureOfAnotherThreadSurvivesDeviceOps, TestGlobalCaptureSurvivesStaging);
// a driver without cuThreadExchangeStreamCaptureMode makes the call as it is.
func (d *Driver) relaxed(call func() C.CUresult) C.CUresult {
	if d.fns.ThreadExchangeStreamCaptureMode == nil {
		return call()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	mode := C.int(captureModeRelaxed)
	if r := C.gcThreadExchangeCaptureMode(d.fns, &mode); r != resultSuccess {
		return r
	}
	defer C.gcThreadExchangeCaptureMode(d.fns, &mode)
	return call()
}

// The special stream handles of the driver API. Each names a different stream on
// different threads (or contexts), so it is resolved on the thread that issued the
// work.
const (
	StreamLegacy    Stream = 0x1 // CU_STREAM_LEGACY: the legacy default stream of the current context
	StreamPerThread Stream = 0x2 // CU_STREAM_PER_THREAD: the calling thread's default stream
)

// StreamCapturing reports whether stream s is being captured into a CUDA graph. Call
// it on the thread that issued the work (see StreamContext).
func (d *Driver) StreamCapturing(s Stream) (bool, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var status C.int
	if err := d.check("cuStreamIsCapturing", C.gcStreamIsCapturing(d.fns, C.uintptr_t(s), &status)); err != nil {
		return false, err
	}
	return status != 0, nil // CU_STREAM_CAPTURE_STATUS_NONE is 0
}

// StreamCapturingOn is StreamCapturing for a stream of device dev: a special handle
// (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) is resolved in dev's primary context, made
// current for the call (and a reference on it held) when the calling thread has no
// context current, as a thread that never made a CUDA call has not: the driver would
// answer CUDA_ERROR_INVALID_CONTEXT there.
func (d *Driver) StreamCapturingOn(s Stream, dev int) (bool, error) {
	if s != StreamLegacy && s != StreamPerThread && s != 0 {
		return d.StreamCapturing(s)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cur C.uintptr_t
	if err := d.check("cuCtxGetCurrent", C.gcCtxGetCurrent(d.fns, &cur)); err != nil {
		return false, err
	}
	if cur != 0 {
		return d.StreamCapturing(s)
	}
	ctx, err := d.RetainPrimary(dev)
	if err != nil {
		return false, err
	}
	defer d.ReleasePrimary(dev)
	var capturing bool
	err = d.Do(ctx, func() (err error) {
		capturing, err = d.StreamCapturing(s)
		return err
	})
	return capturing, err
}

// currentContext is the calling thread's current context (0: none). Call it with the
// goroutine locked to its thread.
func (d *Driver) currentContext() (Context, error) {
	var cur C.uintptr_t
	if err := d.check("cuCtxGetCurrent", C.gcCtxGetCurrent(d.fns, &cur)); err != nil {
		return 0, err
	}
	return Context(cur), nil
}

// ContextDevice returns the device ordinal of context ctx.
func (d *Driver) ContextDevice(ctx Context) (int, error) {
	var dev C.int
	err := d.Do(ctx, func() error { return d.check("cuCtxGetDevice", C.gcCtxGetDevice(d.fns, &dev)) })
	return int(dev), err
}

// RetainPrimary takes a reference on device dev's primary context (the one torch and
// the runtime API use) and returns it: the context then outlives whoever else
// releases it, until ReleasePrimary.
func (d *Driver) RetainPrimary(dev int) (Context, error) {
	var ctx C.uintptr_t
	if err := d.check("cuDevicePrimaryCtxRetain", C.gcPrimaryRetain(d.fns, C.int(dev), &ctx)); err != nil {
		return 0, err
	}
	return Context(ctx), nil
}

// ReleasePrimary drops a reference RetainPrimary took.
func (d *Driver) ReleasePrimary(dev int) error {
	return d.check("cuDevicePrimaryCtxRelease", C.gcPrimaryRelease(d.fns, C.int(dev)))
}

// StreamContext returns the context stream s belongs to. For the special handles
// CU_STREAM_LEGACY and CU_STREAM_PER_THREAD that is the calling thread's current
// context, so call it on the thread that issued the work.
func (d *Driver) StreamContext(s Stream) (Context, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ctx C.uintptr_t
	if err := d.check("cuStreamGetCtx", C.gcStreamGetCtx(d.fns, C.uintptr_t(s), &ctx)); err != nil {
		return 0, err
	}
	return Context(ctx), nil
}

// PointerDevice returns the device ordinal of device pointer p, or an error naming the
// CUDA error if p is not device memory CUDA knows. It runs with ctx current.
func (d *Driver) PointerDevice(ctx Context, p uintptr) (int, error) {
	var ord C.int
	err := d.Do(ctx, func() error {
		return d.check("cuPointerGetAttribute", C.gcPointerDevice(d.fns, &ord, C.uintptr_t(p)))
	})
	return int(ord), err
}

// The wrappers below expect the right context to be current (see Do).

func (d *Driver) MemcpyDtoH(dst []byte, src uintptr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoHAsync", C.gcMemcpyDtoHAsync(d.fns, unsafe.Pointer(&dst[0]), C.uintptr_t(src), C.size_t(len(dst)), C.uintptr_t(s)))
}

func (d *Driver) MemcpyHtoD(dst uintptr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return d.check("cuMemcpyHtoDAsync", C.gcMemcpyHtoDAsync(d.fns, C.uintptr_t(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), C.uintptr_t(s)))
}

func (d *Driver) EventCreate() (Event, error) {
	var e C.uintptr_t
	if err := d.check("cuEventCreate", C.gcEventCreate(d.fns, &e)); err != nil {
		return 0, err
	}
	return Event(e), nil
}

func (d *Driver) EventRecord(e Event, s Stream) error {
	return d.check("cuEventRecord", C.gcEventRecord(d.fns, C.uintptr_t(e), C.uintptr_t(s)))
}

// EventDone reports whether every piece of work e captured has completed.
func (d *Driver) EventDone(e Event) (bool, error) {
	return d.eventDone(d.relaxed(func() C.CUresult { return C.gcEventQuery(d.fns, C.uintptr_t(e)) }))
}

// EventDoneRelaxed is EventDone for a caller that has the thread in relaxed capture
// mode already (inside DoRelaxed: a wait that queries many times exchanges the mode
// once, not around every query).
func (d *Driver) EventDoneRelaxed(e Event) (bool, error) {
	return d.eventDone(C.gcEventQuery(d.fns, C.uintptr_t(e)))
}

// eventDone reads cuEventQuery's result r.
func (d *Driver) eventDone(r C.CUresult) (bool, error) {
	switch r {
	case resultNotReady, resultCaptureUnsupported, resultCaptureInvalidated, resultCaptureImplicit:
		return false, nil
	}
	return r == resultSuccess, d.check("cuEventQuery", r)
}

func (d *Driver) EventDestroy(e Event) error {
	return d.check("cuEventDestroy", C.gcEventDestroy(d.fns, C.uintptr_t(e)))
}

// StreamCreate creates a non-blocking stream in the current context.
func (d *Driver) StreamCreate() (Stream, error) {
	var s C.uintptr_t
	if err := d.check("cuStreamCreate", C.gcStreamCreate(d.fns, &s)); err != nil {
		return 0, err
	}
	return Stream(s), nil
}

// StreamDestroy destroys a stream StreamCreate made; work queued on it still runs.
func (d *Driver) StreamDestroy(s Stream) error {
	return d.check("cuStreamDestroy", C.gcStreamDestroy(d.fns, C.uintptr_t(s)))
}

func (d *Driver) StreamWaitEvent(s Stream, e Event) error {
	return d.check("cuStreamWaitEvent", C.gcStreamWaitEvent(d.fns, C.uintptr_t(s), C.uintptr_t(e)))
}

// HostAlloc allocates n bytes of pinned host memory, usable from every context.
func (d *Driver) HostAlloc(n int) (unsafe.Pointer, error) {
	var p unsafe.Pointer
	if err := d.check("cuMemHostAlloc", d.relaxed(func() C.CUresult { return C.gcMemHostAlloc(d.fns, &p, C.size_t(n), hostAllocPortable) })); err != nil {
		return nil, err
	}
	return p, nil
}

func (d *Driver) HostFree(p unsafe.Pointer) error {
	return d.check("cuMemFreeHost", d.relaxed(func() C.CUresult { return C.gcMemFreeHost(d.fns, p) }))
}

// HostRegister page-locks n bytes of host memory at p (which Go must not own: an
// mmap) and maps them for the device.
func (d *Driver) HostRegister(p unsafe.Pointer, n int, flags uint) error {
	return d.check("cuMemHostRegister", d.relaxed(func() C.CUresult { return C.gcMemHostRegister(d.fns, p, C.size_t(n), C.uint(flags)) }))
}

func (d *Driver) HostUnregister(p unsafe.Pointer) error {
	return d.check("cuMemHostUnregister", d.relaxed(func() C.CUresult { return C.gcMemHostUnregister(d.fns, p) }))
}

// HostDevicePointer is the device address of registered host memory p.
func (d *Driver) HostDevicePointer(p unsafe.Pointer) (uintptr, error) {
	var out C.uintptr_t
	if err := d.check("cuMemHostGetDevicePointer", C.gcMemHostGetDevicePointer(d.fns, &out, p)); err != nil {
		return 0, err
	}
	return uintptr(out), nil
}

// device memory, IPC and stream memory operations (used by the device path and the same-GPU path).
// Like the wrappers above, they expect the right context to be current.

// IPCHandleSize is the size of a CUipcMemHandle.
const IPCHandleSize = 64

func (d *Driver) MemAlloc(n int) (uintptr, error) {
	var p C.uintptr_t
	if err := d.check("cuMemAlloc", d.relaxed(func() C.CUresult { return C.gcMemAlloc(d.fns, &p, C.size_t(n)) })); err != nil {
		return 0, err
	}
	return uintptr(p), nil
}

func (d *Driver) MemFree(p uintptr) error {
	return d.check("cuMemFree", d.relaxed(func() C.CUresult { return C.gcMemFree(d.fns, C.uintptr_t(p)) }))
}

func (d *Driver) IpcGetMemHandle(p uintptr) ([IPCHandleSize]byte, error) {
	var h [IPCHandleSize]byte
	err := d.check("cuIpcGetMemHandle", C.gcIpcGetMemHandle(d.fns, unsafe.Pointer(&h[0]), C.uintptr_t(p)))
	return h, err
}

func (d *Driver) IpcOpenMemHandle(h [IPCHandleSize]byte) (uintptr, error) {
	var p C.uintptr_t
	if err := d.check("cuIpcOpenMemHandle", d.relaxed(func() C.CUresult { return C.gcIpcOpenMemHandle(d.fns, &p, unsafe.Pointer(&h[0])) })); err != nil {
		return 0, err
	}
	return uintptr(p), nil
}

func (d *Driver) IpcCloseMemHandle(p uintptr) error {
	return d.check("cuIpcCloseMemHandle", d.relaxed(func() C.CUresult { return C.gcIpcCloseMemHandle(d.fns, C.uintptr_t(p)) }))
}

func (d *Driver) MemcpyDtoD(dst, src uintptr, n int, s Stream) error {
	if n == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoDAsync", C.gcMemcpyDtoDAsync(d.fns, C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.uintptr_t(s)))
}

// waitGEQ is CU_STREAM_WAIT_VALUE_GEQ: wait until (int32)(*addr - v) >= 0.
const waitGEQ = 0

func (d *Driver) StreamWaitValue32(s Stream, addr uintptr, v uint32) error {
	return d.check("cuStreamWaitValue32", C.gcStreamWaitValue32(d.fns, C.uintptr_t(s), C.uintptr_t(addr), C.uint(v), waitGEQ))
}

func (d *Driver) StreamWriteValue32(s Stream, addr uintptr, v uint32) error {
	return d.check("cuStreamWriteValue32", C.gcStreamWriteValue32(d.fns, C.uintptr_t(s), C.uintptr_t(addr), C.uint(v)))
}

// BusID returns device dev's PCI bus id, normalised ("0000:07:00.0"): the same GPU has
// the same one in every process, whatever CUDA_VISIBLE_DEVICES numbers it there.
func (d *Driver) BusID(dev int) (string, error) {
	var buf [32]C.char
	if err := d.check("cuDeviceGetPCIBusId", C.gcDeviceGetPCIBusId(d.fns, &buf[0], C.int(len(buf)), C.int(dev))); err != nil {
		return "", err
	}
	return NormalizeBusID(C.GoString(&buf[0])), nil
}

// CanAccessPeer reports whether device dev can map and access device peer's memory.
func (d *Driver) CanAccessPeer(dev, peer int) (bool, error) {
	if dev == peer {
		return true, nil
	}
	var can C.int
	err := d.check("cuDeviceCanAccessPeer", C.gcDeviceCanAccessPeer(d.fns, &can, C.int(dev), C.int(peer)))
	return can != 0, err
}

// CopyDevice enqueues a copy of n bytes of device memory from src to dst on stream s
// (cuMemcpyDtoDAsync), in context ctx.
func (d *Driver) CopyDevice(ctx Context, dst, src uintptr, n int, s Stream) error {
	return d.Do(ctx, func() error { return d.MemcpyDtoD(dst, src, n, s) })
}
