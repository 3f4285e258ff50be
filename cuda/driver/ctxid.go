package driver

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;
typedef CUresult (*gxCtxGetIdFn)(void*, unsigned long long*);

// gxResolve finds cuCtxGetId (CUDA 12.0+) in the driver driver.go loaded, or NULL:
// resolved apart from driver.go's table, as only the kernels' module cache asks it.
static void* gxResolve(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == NULL) return NULL;
  void* f = dlsym(h, "cuCtxGetId");
  dlclose(h); // driver.go's handle keeps the library loaded
  return f;
}
static CUresult gxCtxGetId(void* f, uintptr_t ctx, unsigned long long* id) {
  return ((gxCtxGetIdFn)f)((void*)ctx, id);
}
*/
import "C"

import (
	"sync"
	"unsafe"
)

var ctxIDFns struct {
	sync.Mutex
	m map[*Driver]unsafe.Pointer // cuCtxGetId, or nil where the driver lacks it
}

// ContextID is the driver's unique id of ctx (cuCtxGetId): a context made again with
// the same handle, as a primary context reset and retained again is, has another
// id. ok is false where the driver has no cuCtxGetId (before CUDA 12.0) or refuses
// (ctx destroyed). Any context current, or none.
func (d *Driver) ContextID(ctx Context) (id uint64, ok bool) {
	ctxIDFns.Lock()
	f, seen := ctxIDFns.m[d]
	if !seen {
		if ctxIDFns.m == nil {
			ctxIDFns.m = make(map[*Driver]unsafe.Pointer)
		}
		cpath := C.CString(d.path)
		f = C.gxResolve(cpath)
		C.free(unsafe.Pointer(cpath))
		ctxIDFns.m[d] = f
	}
	ctxIDFns.Unlock()
	if f == nil {
		return 0, false
	}
	var v C.ulonglong
	if C.gxCtxGetId(f, C.uintptr_t(ctx), &v) != 0 {
		return 0, false
	}
	return uint64(v), true
}
