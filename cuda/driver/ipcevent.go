package driver

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcEventHandle;

// The entry points only the same-GPU path uses, resolved from the same library as the
// Driver's table (dlopen of an already loaded library hands back the same copy).
typedef struct {
  CUresult (*EventCreate)(void**, unsigned int);
  CUresult (*IpcGetEventHandle)(CUipcEventHandle*, void*);
  CUresult (*IpcOpenEventHandle)(void**, CUipcEventHandle);
  CUresult (*PointerGetAttribute)(void*, int, CUdeviceptr);
} sgFns;

static const char* sgSymbols[] = {"cuEventCreate", "cuIpcGetEventHandle", "cuIpcOpenEventHandle", "cuPointerGetAttribute"};

_Static_assert(sizeof(sgFns) == sizeof(sgSymbols) / sizeof(sgSymbols[0]) * sizeof(void*),
               "sgFns and sgSymbols must list the same entry points, in the same order");

static char* sgOpen(const char* path, sgFns* f) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    const char* e = dlerror();
    return strdup(e ? e : "dlopen failed");
  }
  void** slots = (void**)f;
  for (size_t i = 0; i < sizeof(sgSymbols) / sizeof(sgSymbols[0]); i++) {
    dlerror();
    slots[i] = dlsym(h, sgSymbols[i]);
    if (slots[i] == NULL) {
      const char* e = dlerror();
      return strdup(e ? e : sgSymbols[i]);
    }
  }
  return NULL;
}

#include <stdint.h>
static CUresult sgEventCreateIPC(sgFns* f, uintptr_t* e) {
  void* ev = NULL;
  CUresult r = f->EventCreate(&ev, 0x4 | 0x2); // CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING
  *e = (uintptr_t)ev;
  return r;
}
static CUresult sgIpcGetEventHandle(sgFns* f, void* h, uintptr_t e) { return f->IpcGetEventHandle((CUipcEventHandle*)h, (void*)e); }
static CUresult sgIpcOpenEventHandle(sgFns* f, uintptr_t* e, void* h) {
  CUipcEventHandle handle;
  memcpy(&handle, h, sizeof handle);
  void* ev = NULL;
  CUresult r = f->IpcOpenEventHandle(&ev, handle);
  *e = (uintptr_t)ev;
  return r;
}
static CUresult sgBufferID(sgFns* f, unsigned long long* id, uintptr_t p) {
  return f->PointerGetAttribute(id, 7, (CUdeviceptr)p); // CU_POINTER_ATTRIBUTE_BUFFER_ID
}
static CUresult sgRange(sgFns* f, uintptr_t* base, size_t* size, uintptr_t p) {
  CUdeviceptr b = 0;
  CUresult r = f->PointerGetAttribute(&b, 11, (CUdeviceptr)p); // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
  if (r) return r;
  *base = (uintptr_t)b;
  return f->PointerGetAttribute(size, 12, (CUdeviceptr)p); // CU_POINTER_ATTRIBUTE_RANGE_SIZE
}
static CUresult sgPool(sgFns* f, uintptr_t* pool, uintptr_t p) {
  void* h = NULL;
  CUresult r = f->PointerGetAttribute(&h, 17, (CUdeviceptr)p); // CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
  *pool = (uintptr_t)h;
  return r;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// IPCEventHandleSize is the size of a CUipcEventHandle.
const IPCEventHandleSize = 64

// IPCEvents is the part of the driver that inter-process events and allocation lookups
// need (the same-GPU path and device windows): entry points resolved apart from the
// main table, since not every driver a test loads has them.
type IPCEvents struct {
	d   *Driver
	fns *C.sgFns // C memory
}

// OpenIPCEvents resolves the inter-process event entry points of d's library.
func OpenIPCEvents(d *Driver) (*IPCEvents, error) {
	cpath := C.CString(d.path)
	defer C.free(unsafe.Pointer(cpath))
	fns := (*C.sgFns)(C.calloc(1, C.size_t(unsafe.Sizeof(C.sgFns{}))))
	if msg := C.sgOpen(cpath, fns); msg != nil {
		defer C.free(unsafe.Pointer(msg))
		C.free(unsafe.Pointer(fns))
		return nil, fmt.Errorf("the same-GPU path needs inter-process events: %s", C.GoString(msg))
	}
	return &IPCEvents{d: d, fns: fns}, nil
}

// EventCreateIPC creates an inter-process event (without timing) in the current context.
func (g *IPCEvents) EventCreateIPC() (Event, error) {
	var e C.uintptr_t
	if err := g.d.check("cuEventCreate", C.sgEventCreateIPC(g.fns, &e)); err != nil {
		return 0, err
	}
	return Event(e), nil
}

func (g *IPCEvents) IpcGetEventHandle(e Event) ([IPCEventHandleSize]byte, error) {
	var h [IPCEventHandleSize]byte
	err := g.d.check("cuIpcGetEventHandle", C.sgIpcGetEventHandle(g.fns, unsafe.Pointer(&h[0]), C.uintptr_t(e)))
	return h, err
}

func (g *IPCEvents) IpcOpenEventHandle(h [IPCEventHandleSize]byte) (Event, error) {
	var e C.uintptr_t
	err := g.d.check("cuIpcOpenEventHandle", C.sgIpcOpenEventHandle(g.fns, &e, unsafe.Pointer(&h[0])))
	return Event(e), err
}

// Allocation returns the allocation holding device pointer p: its buffer id (unique
// per allocation in the process, never reused), its base and its size.
func (g *IPCEvents) Allocation(p uintptr) (id uint64, base uintptr, size int, err error) {
	var cid C.ulonglong
	if err = g.d.check("cuPointerGetAttribute", C.sgBufferID(g.fns, &cid, C.uintptr_t(p))); err != nil {
		return 0, 0, 0, err
	}
	var cb C.uintptr_t
	var cs C.size_t
	if err = g.d.check("cuPointerGetAttribute", C.sgRange(g.fns, &cb, &cs, C.uintptr_t(p))); err != nil {
		return 0, 0, 0, err
	}
	return uint64(cid), uintptr(cb), int(cs), nil
}

// FromPool reports whether device pointer p is memory of a stream-ordered pool
// (cuMemAllocAsync, cudaMallocAsync: PyTorch's backend:cudaMallocAsync), which CUDA IPC
// cannot export (cuIpcGetMemHandle takes only cuMemAlloc memory). A driver older than
// CUDA 11.3 does not know the attribute: the error says so.
func (g *IPCEvents) FromPool(p uintptr) (bool, error) {
	var pool C.uintptr_t
	if err := g.d.check("cuPointerGetAttribute", C.sgPool(g.fns, &pool, C.uintptr_t(p))); err != nil {
		return false, err
	}
	return pool != 0, nil
}
