package driver

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;

// CUmemAllocationProp and CUmemAccessDesc, as cuda.h lays them out.
typedef struct {
  int type;                 // CU_MEM_ALLOCATION_TYPE_PINNED = 1
  int requestedHandleTypes; // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
  struct { int type; int id; } location; // CU_MEM_LOCATION_TYPE_DEVICE = 1, ordinal
  void* win32HandleMetaData;
  struct { unsigned char compressionType, gpuDirectRDMACapable; unsigned short usage; unsigned char reserved[4]; } allocFlags;
} gvProp;
typedef struct {
  struct { int type; int id; } location;
  int flags; // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
} gvAccess;

// The virtual memory management entry points (CUDA 10.2+), resolved apart from
// driver.go's table: only the device path needs them, and their absence must not
// disable the default (staged) path.
typedef struct {
  CUresult (*DeviceGetAttribute)(int*, int, int);
  CUresult (*GetGranularity)(size_t*, const gvProp*, int);
  CUresult (*Create)(CUmemGenericAllocationHandle*, size_t, const gvProp*, unsigned long long);
  CUresult (*Export)(void*, CUmemGenericAllocationHandle, int, unsigned long long);
  CUresult (*Import)(CUmemGenericAllocationHandle*, void*, int);
  CUresult (*Reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*AddressFree)(CUdeviceptr, size_t);
  CUresult (*Map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*SetAccess)(CUdeviceptr, size_t, const gvAccess*, size_t);
  CUresult (*Unmap)(CUdeviceptr, size_t);
  CUresult (*Release)(CUmemGenericAllocationHandle);
} gvFns;

static const char* gvSymbols[] = {
  "cuDeviceGetAttribute", "cuMemGetAllocationGranularity", "cuMemCreate", "cuMemExportToShareableHandle",
  "cuMemImportFromShareableHandle", "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap",
  "cuMemSetAccess", "cuMemUnmap", "cuMemRelease",
};

_Static_assert(sizeof(gvFns) == sizeof(gvSymbols) / sizeof(gvSymbols[0]) * sizeof(void*),
               "gvFns and gvSymbols must list the same entry points, in the same order");

// gvOpen resolves the entry points; it returns the index of the first missing one,
// or -1.
static int gvOpen(const char* path, gvFns* f) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == NULL) return 0;
  void** slots = (void**)f;
  int missing = -1;
  for (size_t i = 0; i < sizeof(gvSymbols) / sizeof(gvSymbols[0]); i++) {
    slots[i] = dlsym(h, gvSymbols[i]);
    if (slots[i] == NULL && missing < 0) missing = (int)i;
  }
  dlclose(h); // driver.go's handle keeps the library loaded
  return missing;
}
static const char* gvSymbol(int i) { return gvSymbols[i]; }

static void gvSetProp(gvProp* p, int dev) {
  memset(p, 0, sizeof *p);
  p->type = 1;
  p->requestedHandleTypes = 1;
  p->location.type = 1;
  p->location.id = dev;
}
static CUresult gvAttr(gvFns* f, int* v, int attr, int dev) { return f->DeviceGetAttribute(v, attr, dev); }
static CUresult gvGranularity(gvFns* f, size_t* g, int dev) {
  gvProp p;
  gvSetProp(&p, dev);
  return f->GetGranularity(g, &p, 0); // CU_MEM_ALLOC_GRANULARITY_MINIMUM
}
static CUresult gvCreate(gvFns* f, CUmemGenericAllocationHandle* h, size_t n, int dev) {
  gvProp p;
  gvSetProp(&p, dev);
  return f->Create(h, n, &p, 0);
}
static CUresult gvExport(gvFns* f, int* fd, CUmemGenericAllocationHandle h) { return f->Export(fd, h, 1, 0); }
static CUresult gvImport(gvFns* f, CUmemGenericAllocationHandle* h, int fd) {
  return f->Import(h, (void*)(uintptr_t)fd, 1);
}
static CUresult gvReserve(gvFns* f, uintptr_t* p, size_t n, size_t align) {
  CUdeviceptr d = 0;
  CUresult r = f->Reserve(&d, n, align, 0, 0);
  *p = (uintptr_t)d;
  return r;
}
static CUresult gvAddressFree(gvFns* f, uintptr_t p, size_t n) { return f->AddressFree((CUdeviceptr)p, n); }
static CUresult gvMap(gvFns* f, uintptr_t p, size_t n, CUmemGenericAllocationHandle h) {
  return f->Map((CUdeviceptr)p, n, 0, h, 0);
}
static CUresult gvSetAccess(gvFns* f, uintptr_t p, size_t n, int dev) {
  gvAccess a;
  memset(&a, 0, sizeof a);
  a.location.type = 1;
  a.location.id = dev;
  a.flags = 3;
  return f->SetAccess((CUdeviceptr)p, n, &a, 1);
}
static CUresult gvUnmap(gvFns* f, uintptr_t p, size_t n) { return f->Unmap((CUdeviceptr)p, n); }
static CUresult gvRelease(gvFns* f, CUmemGenericAllocationHandle h) { return f->Release(h); }
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Device memory that outlives the process that made it (CUDA's virtual memory
// management): cuMemCreate makes physical memory exportable as a POSIX file
// descriptor (cuMemExportToShareableHandle); a peer imports the descriptor
// (cuMemImportFromShareableHandle) and maps it at an address of its own
// (cuMemAddressReserve, cuMemMap, cuMemSetAccess). The memory is freed only once its
// creator and every importer have unmapped it and released their handles, so a peer
// that dies does not take memory that a survivor's queued work still reads. (Memory
// from cuMemAlloc shared with cuIpcOpenMemHandle goes with its exporter's context.)

const (
	attrVMM     = 102 // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
	attrPosixFD = 103 // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
)

// ErrNoVMM means the driver or the device cannot share memory as file descriptors
// (the reason follows).
var ErrNoVMM = errors.New("cuda: no fd-shareable device memory")

var vmmFns struct {
	sync.Mutex
	m map[*Driver]*vmmTable
}

type vmmTable struct {
	f       *C.gvFns
	missing string // the first entry point the driver lacks, or ""
}

func (d *Driver) vmm() *vmmTable {
	vmmFns.Lock()
	defer vmmFns.Unlock()
	if vmmFns.m == nil {
		vmmFns.m = make(map[*Driver]*vmmTable)
	}
	t := vmmFns.m[d]
	if t == nil {
		t = &vmmTable{f: (*C.gvFns)(C.calloc(1, C.size_t(unsafe.Sizeof(C.gvFns{}))))}
		cpath := C.CString(d.path)
		if i := C.gvOpen(cpath, t.f); i >= 0 {
			t.missing = C.GoString(C.gvSymbol(i))
		}
		C.free(unsafe.Pointer(cpath))
		vmmFns.m[d] = t
	}
	return t
}

// VMMSupported returns nil if device dev can make memory that peers map through a
// file descriptor, else an error wrapping ErrNoVMM that says why (an entry point the
// driver lacks, or the device attribute that is 0). Any context.
func (d *Driver) VMMSupported(dev int) error {
	t := d.vmm()
	if t.missing != "" {
		return fmt.Errorf("%w: the driver has no %s (CUDA 10.2+ needed)", ErrNoVMM, t.missing)
	}
	for _, a := range []struct {
		attr int
		name string
	}{{attrVMM, "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED"}, {attrPosixFD, "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED"}} {
		var v C.int
		if err := d.check("cuDeviceGetAttribute", C.gvAttr(t.f, &v, C.int(a.attr), C.int(dev))); err != nil {
			return fmt.Errorf("%w: device %d: %w", ErrNoVMM, dev, err)
		}
		if v == 0 {
			return fmt.Errorf("%w: device %d: %s = 0", ErrNoVMM, dev, a.name)
		}
	}
	return nil
}

// Exported is device memory made by MemCreateExported: mapped at Ptr (Size bytes,
// a multiple of the device's granularity), and FD, the file descriptor peers import it
// from (the caller closes it once passed on).
type Exported struct {
	Ptr  uintptr
	Size int
	FD   int
}

// granularity is the device's minimum allocation granularity for exportable memory.
func (d *Driver) granularity(t *vmmTable, dev int) (int, error) {
	var g C.size_t
	if err := d.check("cuMemGetAllocationGranularity", C.gvGranularity(t.f, &g, C.int(dev))); err != nil {
		return 0, err
	}
	if g == 0 {
		g = 1
	}
	return int(g), nil
}

// MemCreateExported makes at least n bytes of device memory on dev that peers can
// map (MemImportFD), maps it here with read and write access for dev, and exports it
// as a file descriptor. The handle is released at once: the mapping keeps the memory,
// which MemUnmapShared gives back. The context of dev is current.
func (d *Driver) MemCreateExported(dev, n int) (e Exported, err error) {
	if err := d.VMMSupported(dev); err != nil {
		return e, err
	}
	t := d.vmm()
	g, err := d.granularity(t, dev)
	if err != nil {
		return e, err
	}
	e.Size, e.FD = (n+g-1)/g*g, -1
	var h C.CUmemGenericAllocationHandle
	if err := d.check("cuMemCreate", C.gvCreate(t.f, &h, C.size_t(e.Size), C.int(dev))); err != nil {
		return e, err
	}
	defer func() {
		if rerr := d.check("cuMemRelease", C.gvRelease(t.f, h)); rerr != nil && err == nil {
			err = rerr
		}
		if err != nil && e.FD >= 0 {
			_ = unix.Close(e.FD)
			e.FD = -1
		}
	}()
	var fd C.int
	if err := d.check("cuMemExportToShareableHandle", C.gvExport(t.f, &fd, h)); err != nil {
		return e, err
	}
	e.FD = int(fd)
	e.Ptr, err = d.mapHandle(t, h, e.Size, g, dev)
	return e, err
}

// MemImportFD maps the n bytes of device memory a peer exported as fd
// (MemCreateExported) with read and write access for dev, and returns its address
// here. The caller still owns fd. The context of dev is current.
func (d *Driver) MemImportFD(fd, n, dev int) (p uintptr, err error) {
	if err := d.VMMSupported(dev); err != nil {
		return 0, err
	}
	t := d.vmm()
	g, err := d.granularity(t, dev)
	if err != nil {
		return 0, err
	}
	if n%g != 0 {
		return 0, fmt.Errorf("cuda: a peer's exported memory has %d bytes, not a multiple of device %d's granularity %d", n, dev, g)
	}
	var h C.CUmemGenericAllocationHandle
	if err := d.check("cuMemImportFromShareableHandle", C.gvImport(t.f, &h, C.int(fd))); err != nil {
		return 0, err
	}
	defer func() {
		if rerr := d.check("cuMemRelease", C.gvRelease(t.f, h)); rerr != nil && err == nil {
			err = rerr
		}
	}()
	return d.mapHandle(t, h, n, g, dev)
}

// mapHandle reserves n bytes of addresses, maps h there and gives dev read and write
// access to it.
func (d *Driver) mapHandle(t *vmmTable, h C.CUmemGenericAllocationHandle, n, g, dev int) (uintptr, error) {
	var p C.uintptr_t
	if err := d.check("cuMemAddressReserve", C.gvReserve(t.f, &p, C.size_t(n), C.size_t(g))); err != nil {
		return 0, err
	}
	if err := d.check("cuMemMap", C.gvMap(t.f, p, C.size_t(n), h)); err != nil {
		_ = d.check("cuMemAddressFree", C.gvAddressFree(t.f, p, C.size_t(n)))
		return 0, err
	}
	if err := d.check("cuMemSetAccess", C.gvSetAccess(t.f, p, C.size_t(n), C.int(dev))); err != nil {
		_ = d.check("cuMemUnmap", C.gvUnmap(t.f, p, C.size_t(n)))
		_ = d.check("cuMemAddressFree", C.gvAddressFree(t.f, p, C.size_t(n)))
		return 0, err
	}
	return uintptr(p), nil
}

// MemUnmapShared unmaps n bytes at p (mapped by MemCreateExported or MemImportFD)
// and frees the addresses; the memory itself is freed once no process maps it.
func (d *Driver) MemUnmapShared(p uintptr, n int) error {
	t := d.vmm()
	if t.missing != "" {
		return fmt.Errorf("%w: the driver has no %s", ErrNoVMM, t.missing)
	}
	return errors.Join(d.check("cuMemUnmap", C.gvUnmap(t.f, C.uintptr_t(p), C.size_t(n))),
		d.check("cuMemAddressFree", C.gvAddressFree(t.f, C.uintptr_t(p), C.size_t(n))))
}

// MemGrantAccess gives device dev read and write access to the n bytes at p, mapped
// in this process by MemCreateExported or MemImportFD for another device: a kernel of
// dev may then touch them (a copy needs no access; a kernel without it faults).
func (d *Driver) MemGrantAccess(p uintptr, n, dev int) error {
	t := d.vmm()
	if t.missing != "" {
		return fmt.Errorf("%w: the driver has no %s", ErrNoVMM, t.missing)
	}
	return d.check("cuMemSetAccess", C.gvSetAccess(t.f, C.uintptr_t(p), C.size_t(n), C.int(dev)))
}
