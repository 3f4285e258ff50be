package driver

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*winAttrFn)(void*, int, CUdeviceptr);

// winAttrOpen resolves cuPointerGetAttribute from the driver at path (already loaded:
// dlopen hands back the same copy); NULL if it cannot.
static void* winAttrOpen(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return h ? dlsym(h, "cuPointerGetAttribute") : NULL;
}

// winPointer reads p's memory type (CU_POINTER_ATTRIBUTE_MEMORY_TYPE) and, for device
// memory, its device ordinal (CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL).
static CUresult winPointer(void* fn, uintptr_t p, unsigned* type, int* dev) {
  CUresult r = ((winAttrFn)fn)(type, 2, (CUdeviceptr)p);
  if (r || *type != 2) return r; // 2: CU_MEMORYTYPE_DEVICE
  return ((winAttrFn)fn)(dev, 9, (CUdeviceptr)p);
}
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

var winAttr struct {
	sync.Mutex
	m map[*Driver]unsafe.Pointer
}

// DevicePointer reports whether p is device memory (not host memory, pinned or not,
// and not a pointer CUDA does not know), and if so on which device. It may be called on
// any thread, with or without a context current.
func (d *Driver) DevicePointer(p uintptr) (dev int, ok bool) {
	winAttr.Lock()
	fn, seen := winAttr.m[d]
	if !seen {
		cpath := C.CString(d.path)
		fn = C.winAttrOpen(cpath)
		C.free(unsafe.Pointer(cpath))
		if winAttr.m == nil {
			winAttr.m = map[*Driver]unsafe.Pointer{}
		}
		winAttr.m[d] = fn
	}
	winAttr.Unlock()
	if fn == nil || p == 0 {
		return 0, false
	}
	var typ C.unsigned
	var ord C.int
	var r C.CUresult
	query := func() error {
		r = C.winPointer(fn, C.uintptr_t(p), &typ, &ord)
		return nil
	}
	// The driver answers only with a context current (any one: unified addressing).
	// A thread that never made one current (a C ABI caller's) asks in the primary
	// context of a device the process already uses (its context is active), holding a
	// reference on it for the call: retaining an inactive one would create a context,
	// GPU memory included, on a GPU the process may never use. Device 0's only where
	// none is active.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cur, err := d.currentContext(); err != nil {
		return 0, false
	} else if cur != 0 {
		_ = query()
	} else {
		dev := d.activeDevice()
		ctx, err := d.RetainPrimary(dev)
		if err != nil {
			return 0, false
		}
		_ = d.Do(ctx, query)
		_ = d.ReleasePrimary(dev)
	}
	if r != 0 || typ != 2 {
		return 0, false
	}
	return int(ord), true
}
