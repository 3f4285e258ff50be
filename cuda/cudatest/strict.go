package cudatest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef struct {
  long dev_allocs, dev_frees, ipc_exports, ipc_opens, ipc_closes, drains, lazy_loads, dead_peer_writes, dead_peer_reads;
  long dead_maker_kernel_reads, kernels_aborted;
} strictCounters;

static int strictCountersAt(const char* path, strictCounters* out) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return -1;
  void (*get)(strictCounters*) = (void (*)(strictCounters*))dlsym(lib, "fakecudaGetStrictCounters");
  if (get == NULL) return -2;
  get(out);
  return 0;
}

static int callCountsAt(const char* path, char* buf, size_t n) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return -1;
  int (*get)(char*, size_t) = (int (*)(char*, size_t))dlsym(lib, "fakecudaCallCounts");
  if (get == NULL) return -2;
  return get(buf, n);
}
*/
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"unsafe"
)

// StrictCounters mirrors fakecudaStrictCounters: what the fake's stricter parts count
// (tests/fakecuda/drain.c, deadpeer.c).
type StrictCounters struct {
	DevAllocs, DevFrees             int // cuMemAlloc, cuMemFree
	IpcExports, IpcOpens, IpcCloses int // cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle
	Drains                          int // calls that waited for the whole context (allocations, frees, lazy loads)
	LazyLoads                       int // first launches of kernels that were not loaded up front
	DeadMakerKernelReads            int // kernels run on memory another process made and has died (still valid, a dead rank's bytes)
	KernelsAborted                  int // kernels that found their abort word set and touched nothing
}

// Sub returns c - o, field by field.
func (c StrictCounters) Sub(o StrictCounters) StrictCounters {
	return StrictCounters{c.DevAllocs - o.DevAllocs, c.DevFrees - o.DevFrees, c.IpcExports - o.IpcExports,
		c.IpcOpens - o.IpcOpens, c.IpcCloses - o.IpcCloses, c.Drains - o.Drains, c.LazyLoads - o.LazyLoads,
		c.DeadMakerKernelReads - o.DeadMakerKernelReads, c.KernelsAborted - o.KernelsAborted}
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
		int(c.ipc_closes), int(c.drains), int(c.lazy_loads), int(c.dead_maker_kernel_reads), int(c.kernels_aborted)}, nil
}

// Calls counts the calls of each driver entry point (tests/fakecuda/calls.c), by name.
type Calls map[string]int

// CallsAt reads the call counts of the fake driver at path (the copy this process
// loaded).
func CallsAt(path string) (Calls, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	n := 4096
	for {
		buf := (*C.char)(C.malloc(C.size_t(n)))
		need := int(C.callCountsAt(cp, buf, C.size_t(n)))
		text := C.GoString(buf)
		C.free(unsafe.Pointer(buf))
		if need < 0 {
			return nil, fmt.Errorf("reading the fake CUDA driver's call counts in %s: %d", path, need)
		}
		if need <= n {
			return ParseCalls(text)
		}
		n = need
	}
}

// ParseCalls reads call counts as the fake writes them: one "name count" line each
// (FAKECUDA_CALL_COUNTS files too).
func ParseCalls(text string) (Calls, error) {
	c := Calls{}
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line == "" {
			continue
		}
		name, count, ok := strings.Cut(line, " ")
		n, err := strconv.Atoi(count)
		if !ok || err != nil {
			return nil, fmt.Errorf("a call count line %q", line)
		}
		c[name] += n
	}
	return c, nil
}

// Sub returns c - o, entry point by entry point (those with no new calls left out).
func (c Calls) Sub(o Calls) Calls {
	d := Calls{}
	for name, n := range c {
		if n -= o[name]; n != 0 {
			d[name] = n
		}
	}
	return d
}

// Total is the number of calls of every entry point together.
func (c Calls) Total() int {
	t := 0
	for _, n := range c {
		t += n
	}
	return t
}
