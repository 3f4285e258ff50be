package cudatest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef struct {
  long dev_allocs, dev_frees, ipc_exports, ipc_opens, ipc_closes, drains, lazy_loads, dead_peer_writes, dead_peer_reads;
} strictCounters;

static int strictCountersAt(const char* path, strictCounters* out) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return -1;
  void (*get)(strictCounters*) = (void (*)(strictCounters*))dlsym(lib, "fakecudaGetStrictCounters");
  if (get == NULL) return -2;
  get(out);
  return 0;
}
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// StrictCounters mirrors fakecudaStrictCounters: what the fake's stricter parts count
// (tests/fakecuda/drain.c, deadpeer.c).
type StrictCounters struct {
	DevAllocs, DevFrees             int // cuMemAlloc, cuMemFree
	IpcExports, IpcOpens, IpcCloses int // cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle
	Drains                          int // calls that waited for the whole context (allocations, frees, lazy loads)
	LazyLoads                       int // first launches of kernels that were not loaded up front
}

// Sub returns c - o, field by field.
func (c StrictCounters) Sub(o StrictCounters) StrictCounters {
	return StrictCounters{c.DevAllocs - o.DevAllocs, c.DevFrees - o.DevFrees, c.IpcExports - o.IpcExports,
		c.IpcOpens - o.IpcOpens, c.IpcCloses - o.IpcCloses, c.Drains - o.Drains, c.LazyLoads - o.LazyLoads}
}

// StrictCountersAt reads the strict counters of the fake driver at path (the copy
// this process loaded).
func StrictCountersAt(path string) (StrictCounters, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var c C.strictCounters
	if r := C.strictCountersAt(cp, &c); r != 0 {
		return StrictCounters{}, fmt.Errorf("reading the fake CUDA driver's strict counters in %s: %d", path, int(r))
	}
	return StrictCounters{int(c.dev_allocs), int(c.dev_frees), int(c.ipc_exports), int(c.ipc_opens),
		int(c.ipc_closes), int(c.drains), int(c.lazy_loads)}, nil
}
