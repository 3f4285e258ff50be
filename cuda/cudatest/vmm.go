package cudatest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  int type, handles;
  struct { int type, id; } loc;
  void* win32;
  unsigned char flags[8];
} vProp;
typedef struct {
  struct { int type, id; } loc;
  int flags;
} vAccess;

typedef struct {
  int (*create)(unsigned long long*, size_t, const vProp*, unsigned long long);
  int (*release)(unsigned long long);
  int (*exportFD)(void*, unsigned long long, int, unsigned long long);
  int (*importFD)(unsigned long long*, void*, int);
  int (*reserve)(unsigned long long*, size_t, size_t, unsigned long long, unsigned long long);
  int (*addrFree)(unsigned long long, size_t);
  int (*map)(unsigned long long, size_t, size_t, unsigned long long, unsigned long long);
  int (*setAccess)(unsigned long long, size_t, const vAccess*, size_t);
  int (*unmap)(unsigned long long, size_t);
  int (*dtod)(unsigned long long, unsigned long long, size_t, void*);
} vFns;

static int vOpen(const char* path, vFns* f) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return -1;
  const char* names[] = {"cuMemCreate", "cuMemRelease", "cuMemExportToShareableHandle",
                         "cuMemImportFromShareableHandle", "cuMemAddressReserve", "cuMemAddressFree",
                         "cuMemMap", "cuMemSetAccess", "cuMemUnmap", "cuMemcpyDtoDAsync_v2"};
  void** slots = (void**)f;
  for (int i = 0; i < 10; i++)
    if ((slots[i] = dlsym(h, names[i])) == NULL) return -2;
  return 0;
}
static int vCreate(vFns* f, unsigned long long* h, size_t n, int dev, int fd) {
  vProp p;
  memset(&p, 0, sizeof p);
  p.type = 1;
  p.handles = fd ? 1 : 0;
  p.loc.type = 1;
  p.loc.id = dev;
  return f->create(h, n, &p, 0);
}
static int vRelease(vFns* f, unsigned long long h) { return f->release(h); }
static int vExport(vFns* f, unsigned long long h, int* fd) { return f->exportFD(fd, h, 1, 0); }
static int vImport(vFns* f, unsigned long long* h, int fd) { return f->importFD(h, (void*)(intptr_t)fd, 1); }
static int vReserve(vFns* f, unsigned long long* p, size_t n) { return f->reserve(p, n, 0, 0, 0); }
static int vAddrFree(vFns* f, unsigned long long p, size_t n) { return f->addrFree(p, n); }
static int vMap(vFns* f, unsigned long long p, size_t n, size_t off, unsigned long long h) { return f->map(p, n, off, h, 0); }
static int vSetAccess(vFns* f, unsigned long long p, size_t n, int dev, int flags) {
  vAccess a;
  memset(&a, 0, sizeof a);
  a.loc.type = 1;
  a.loc.id = dev;
  a.flags = flags;
  return f->setAccess(p, n, &a, 1);
}
static int vUnmap(vFns* f, unsigned long long p, size_t n) { return f->unmap(p, n); }
static int vCopy(vFns* f, unsigned long long dst, unsigned long long src, size_t n, uintptr_t s) {
  return f->dtod(dst, src, n, (void*)s);
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// VMM calls the fake's virtual memory management entry points (tests/fakecuda/vmm.c)
// directly, with any arguments, so a test can hold the fake to the driver's rules; each
// returns the CUresult. Calls that need a context need one current on the calling
// thread.
type VMM struct{ f *C.vFns }

// Granularity is the fake's allocation granularity.
const Granularity = 2 << 20

// OpenVMM resolves the entry points in the fake driver at path.
func OpenVMM(path string) (*VMM, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	f := (*C.vFns)(C.calloc(1, C.size_t(unsafe.Sizeof(C.vFns{}))))
	if r := C.vOpen(cp, f); r != 0 {
		C.free(unsafe.Pointer(f))
		return nil, fmt.Errorf("resolving the fake's cuMem* entry points in %s: %d", path, int(r))
	}
	return &VMM{f}, nil
}

// Create is cuMemCreate of n bytes on dev, exportable as a file descriptor if fd.
func (v *VMM) Create(n, dev int, fd bool) (uint64, int) {
	var h C.ulonglong
	f := C.int(0)
	if fd {
		f = 1
	}
	r := C.vCreate(v.f, &h, C.size_t(n), C.int(dev), f)
	return uint64(h), int(r)
}

// Release is cuMemRelease.
func (v *VMM) Release(h uint64) int { return int(C.vRelease(v.f, C.ulonglong(h))) }

// Export is cuMemExportToShareableHandle to a POSIX file descriptor.
func (v *VMM) Export(h uint64) (int, int) {
	var fd C.int
	r := C.vExport(v.f, C.ulonglong(h), &fd)
	return int(fd), int(r)
}

// Import is cuMemImportFromShareableHandle of a POSIX file descriptor.
func (v *VMM) Import(fd int) (uint64, int) {
	var h C.ulonglong
	r := C.vImport(v.f, &h, C.int(fd))
	return uint64(h), int(r)
}

// Reserve is cuMemAddressReserve of n bytes.
func (v *VMM) Reserve(n int) (uintptr, int) {
	var p C.ulonglong
	r := C.vReserve(v.f, &p, C.size_t(n))
	return uintptr(p), int(r)
}

// AddressFree is cuMemAddressFree.
func (v *VMM) AddressFree(p uintptr, n int) int {
	return int(C.vAddrFree(v.f, C.ulonglong(p), C.size_t(n)))
}

// Map is cuMemMap of n bytes of h from off at p.
func (v *VMM) Map(p uintptr, n, off int, h uint64) int {
	return int(C.vMap(v.f, C.ulonglong(p), C.size_t(n), C.size_t(off), C.ulonglong(h)))
}

// SetAccess is cuMemSetAccess for dev (flags: 0 none, 1 read, 3 read and write).
func (v *VMM) SetAccess(p uintptr, n, dev, flags int) int {
	return int(C.vSetAccess(v.f, C.ulonglong(p), C.size_t(n), C.int(dev), C.int(flags)))
}

// Unmap is cuMemUnmap.
func (v *VMM) Unmap(p uintptr, n int) int { return int(C.vUnmap(v.f, C.ulonglong(p), C.size_t(n))) }

// Copy is cuMemcpyDtoDAsync on stream s (it checks both ranges when queued).
func (v *VMM) Copy(dst, src uintptr, n int, s uintptr) int {
	return int(C.vCopy(v.f, C.ulonglong(dst), C.ulonglong(src), C.size_t(n), C.uintptr_t(s)))
}
