package cudatest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
  int (*allocAsync)(unsigned long long*, size_t, void*);
  int (*freeAsync)(unsigned long long, void*);
  int (*attr)(void*, int, unsigned long long);
  int (*ipcGet)(void*, unsigned long long);
} pFns;

static int pOpen(const char* path, pFns* f) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return -1;
  const char* names[] = {"cuMemAllocAsync", "cuMemFreeAsync", "cuPointerGetAttribute", "cuIpcGetMemHandle"};
  void** slots = (void**)f;
  for (int i = 0; i < 4; i++)
    if ((slots[i] = dlsym(h, names[i])) == NULL) return -2;
  return 0;
}
static int pAlloc(pFns* f, unsigned long long* p, size_t n, uintptr_t s) { return f->allocAsync(p, n, (void*)s); }
static int pFree(pFns* f, unsigned long long p, uintptr_t s) { return f->freeAsync(p, (void*)s); }
static int pAttr(pFns* f, unsigned long long* v, int attr, unsigned long long p) {
  *v = 0;
  return f->attr(v, attr, p);
}
static int pIpcGet(pFns* f, unsigned long long p) {
  char h[64];
  return f->ipcGet(h, p);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Pool calls the fake's stream-ordered allocator (tests/fakecuda/pool.c: cudaMallocAsync
// memory, PyTorch's backend:cudaMallocAsync) and the calls that ask about memory
// directly, each returning the CUresult. A context must be current on the calling
// thread where the driver needs one.
type Pool struct{ f *C.pFns }

// OpenPool resolves the entry points in the fake driver at path.
func OpenPool(path string) (*Pool, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	f := (*C.pFns)(C.calloc(1, C.size_t(unsafe.Sizeof(C.pFns{}))))
	if r := C.pOpen(cp, f); r != 0 {
		C.free(unsafe.Pointer(f))
		return nil, fmt.Errorf("resolving the fake's stream-ordered allocator in %s: %d", path, int(r))
	}
	return &Pool{f}, nil
}

// Alloc is cuMemAllocAsync of n bytes on stream s.
func (p *Pool) Alloc(n int, s uintptr) (uintptr, int) {
	var out C.ulonglong
	r := C.pAlloc(p.f, &out, C.size_t(n), C.uintptr_t(s))
	return uintptr(out), int(r)
}

// Free is cuMemFreeAsync of ptr on stream s.
func (p *Pool) Free(ptr, s uintptr) int { return int(C.pFree(p.f, C.ulonglong(ptr), C.uintptr_t(s))) }

// Attr is cuPointerGetAttribute of attribute attr (read as up to 8 bytes) of ptr.
func (p *Pool) Attr(ptr uintptr, attr int) (uint64, int) {
	var v C.ulonglong
	r := C.pAttr(p.f, &v, C.int(attr), C.ulonglong(ptr))
	return uint64(v), int(r)
}

// IpcGet is cuIpcGetMemHandle of ptr (the handle is dropped).
func (p *Pool) IpcGet(ptr uintptr) int { return int(C.pIpcGet(p.f, C.ulonglong(ptr))) }
