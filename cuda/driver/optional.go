package driver

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;

// Entry points gonccl uses where the driver has them, resolved apart from driver.go's
// table (which fails the load on a missing one).
typedef struct {
  CUresult (*DeviceGetByPCIBusId)(int*, const char*); // every CUDA driver
  CUresult (*FuncLoad)(void*);                        // CUDA 12.4+
  CUresult (*DeviceGetCount)(int*);                   // every CUDA driver
  CUresult (*PrimaryCtxGetState)(int, unsigned*, int*); // every CUDA driver
} goOptFns;

static void goOptOpen(const char* path, goOptFns* f) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == NULL) return;
  f->DeviceGetByPCIBusId = (CUresult(*)(int*, const char*))dlsym(h, "cuDeviceGetByPCIBusId");
  f->FuncLoad = (CUresult(*)(void*))dlsym(h, "cuFuncLoad");
  f->DeviceGetCount = (CUresult(*)(int*))dlsym(h, "cuDeviceGetCount");
  f->PrimaryCtxGetState = (CUresult(*)(int, unsigned*, int*))dlsym(h, "cuDevicePrimaryCtxGetState_v2");
  if (f->PrimaryCtxGetState == NULL)
    f->PrimaryCtxGetState = (CUresult(*)(int, unsigned*, int*))dlsym(h, "cuDevicePrimaryCtxGetState");
  dlclose(h); // driver.go's handle keeps the library loaded
}
static CUresult goDeviceByBusID(goOptFns* f, const char* bus, int* dev) { return f->DeviceGetByPCIBusId(dev, bus); }
static CUresult goFuncLoad(goOptFns* f, uintptr_t fn) { return f->FuncLoad((void*)fn); }
// goActiveDevice returns the first device whose primary context is active, or -1.
static int goActiveDevice(goOptFns* f) {
  int n = 0;
  if (f->DeviceGetCount == NULL || f->PrimaryCtxGetState == NULL || f->DeviceGetCount(&n) != 0) return -1;
  for (int dev = 0; dev < n; dev++) {
    unsigned flags = 0;
    int active = 0;
    if (f->PrimaryCtxGetState(dev, &flags, &active) == 0 && active) return dev;
  }
  return -1;
}
*/
import "C"

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"unsafe"
)

// optional returns the driver's optional entry points, resolved on first use.
func (d *Driver) optional() *C.goOptFns {
	optFns.Lock()
	defer optFns.Unlock()
	if optFns.m == nil {
		optFns.m = make(map[*Driver]*C.goOptFns)
	}
	f := optFns.m[d]
	if f == nil {
		f = (*C.goOptFns)(C.calloc(1, C.size_t(unsafe.Sizeof(C.goOptFns{}))))
		cpath := C.CString(d.path)
		C.goOptOpen(cpath, f)
		C.free(unsafe.Pointer(cpath))
		optFns.m[d] = f
	}
	return f
}

var optFns struct {
	sync.Mutex
	m map[*Driver]*C.goOptFns
}

// DeviceByBusID returns the ordinal this process knows the GPU with PCI bus id bus
// by, and false if it does not see that GPU (CUDA_VISIBLE_DEVICES) or cannot tell.
func (d *Driver) DeviceByBusID(bus string) (int, bool) {
	f := d.optional()
	if f.DeviceGetByPCIBusId == nil || bus == "" {
		return 0, false
	}
	cbus := C.CString(bus)
	defer C.free(unsafe.Pointer(cbus))
	var dev C.int
	if C.goDeviceByBusID(f, cbus, &dev) != 0 {
		return 0, false
	}
	return int(dev), true
}

// activeDevice returns a device whose primary context is active (one the process
// already uses: asking in it creates no context), or 0 where none is or the driver
// cannot tell.
func (d *Driver) activeDevice() int {
	if dev := int(C.goActiveDevice(d.optional())); dev >= 0 {
		return dev
	}
	return 0
}

// FuncLoad loads kernel fn now where the driver can (cuFuncLoad), so that its first
// launch does not: under lazy loading (the driver's default) that first launch may
// wait for the context's other work, a stream waiting on a peer's flag included.
// The context is current.
func (d *Driver) FuncLoad(fn uintptr) error {
	f := d.optional()
	if f.FuncLoad == nil {
		return nil // an older driver: it loads at cuModuleGetFunction or first launch
	}
	return d.check("cuFuncLoad", C.goFuncLoad(f, C.uintptr_t(fn)))
}

// ProcessID names this process among the ranks of a host: a pid does not (two
// processes in different PID namespaces may have the same one, and share a GPU).
var ProcessID = func() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("cuda: no randomness for the process id: " + err.Error())
	}
	return binary.LittleEndian.Uint64(b[:]) | 1 // never 0, which a zeroed record holds
}()
