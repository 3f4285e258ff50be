// Package cudatest builds the fake CUDA driver (tests/fakecuda) for Go tests and
// reaches its test hooks. Only tests import it.
package cudatest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
  long dtoh, htod, kernels, host_allocs, host_frees, host_live, events_created, events_destroyed,
      bad_access, host_races, context_errors, stale_reads, captured_ops, primary_retained,
      primary_resets, gpu_waits, ts_switches;
} counters;

typedef struct {
  void* (*Malloc)(int, size_t);
  int (*Free)(void*);
  void* (*StreamCreate)(int);
  void* (*Context)(int);
  void (*SetDelay)(unsigned, unsigned);
  int (*FillF32)(void*, void*, size_t, float, unsigned);
  int (*AddF32)(void*, void*, size_t, float, unsigned);
  int (*Drain)(void*);
  void (*Counters)(counters*);
  void* (*StreamCreateWithFlags)(int, unsigned);
  int (*BeginCapture)(void*);
  int (*EndCapture)(void*);
  int (*CheckF32)(void*, void*, size_t, float, unsigned);
  int (*CtxSetCurrent)(void*);
  int (*RuntimeInit)(int);
  int (*RuntimeRelease)(int);
  void* (*PoolStream)(int);
  void (*SetCopyRate)(unsigned);
  int (*HardwareQueues)(void);
} hooks;

static const char* hookNames[] = {
  "fakecudaMalloc", "fakecudaFree", "fakecudaStreamCreate", "fakecudaContext", "fakecudaSetDelay",
  "fakecudaFillF32", "fakecudaAddF32", "fakecudaStreamDrain", "fakecudaGetCounters",
  "fakecudaStreamCreateWithFlags", "fakecudaBeginCapture", "fakecudaEndCapture", "fakecudaCheckF32",
  "cuCtxSetCurrent", "fakecudaRuntimeInit", "fakecudaRuntimeRelease", "fakecudaPoolStream",
  "fakecudaSetCopyRate", "fakecudaHardwareQueues",
};

static int openHooks(const char* path, hooks* h) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return -1;
  void** slots = (void**)h;
  for (size_t i = 0; i < sizeof(hookNames) / sizeof(hookNames[0]); i++) {
    slots[i] = dlsym(lib, hookNames[i]);
    if (slots[i] == NULL) return -2 - (int)i;
  }
  return 0;
}

static uintptr_t hMalloc(hooks* h, int dev, size_t n) { return (uintptr_t)h->Malloc(dev, n); }
static int hFree(hooks* h, uintptr_t p) { return h->Free((void*)p); }
static int hQueues(hooks* h) { return h->HardwareQueues(); }
static uintptr_t hStream(hooks* h, int dev) { return (uintptr_t)h->StreamCreate(dev); }
static uintptr_t hContext(hooks* h, int dev) { return (uintptr_t)h->Context(dev); }
static void hSetDelay(hooks* h, unsigned lo, unsigned hi) { h->SetDelay(lo, hi); }
static void hSetCopyRate(hooks* h, unsigned r) { h->SetCopyRate(r); }
static int hFill(hooks* h, uintptr_t s, uintptr_t p, size_t n, float v, unsigned d) { return h->FillF32((void*)s, (void*)p, n, v, d); }
static int hAdd(hooks* h, uintptr_t s, uintptr_t p, size_t n, float v, unsigned d) { return h->AddF32((void*)s, (void*)p, n, v, d); }
static uintptr_t hStreamFlags(hooks* h, int dev, unsigned f) { return (uintptr_t)h->StreamCreateWithFlags(dev, f); }
static int hCapture(hooks* h, uintptr_t s, int on) { return on ? h->BeginCapture((void*)s) : h->EndCapture((void*)s); }
static int hCheck(hooks* h, uintptr_t s, uintptr_t p, size_t n, float v, unsigned d) { return h->CheckF32((void*)s, (void*)p, n, v, d); }
static int hSetCurrent(hooks* h, uintptr_t c) { return h->CtxSetCurrent((void*)c); }
static int hDrain(hooks* h, uintptr_t s) { return h->Drain((void*)s); }
static int hRuntime(hooks* h, int dev, int on) { return on ? h->RuntimeInit(dev) : h->RuntimeRelease(dev); }
static uintptr_t hPoolStream(hooks* h, int dev) { return (uintptr_t)h->PoolStream(dev); }
static void hCounters(hooks* h, counters* c) { h->Counters(c); }
static float hRead(uintptr_t p, size_t i) { return ((float*)p)[i]; }
static void* hPtr(uintptr_t p) { return (void*)p; }
static void hWrite(uintptr_t p, size_t i, float v) { ((float*)p)[i] = v; }
*/
import "C"

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// Sources returns the paths of the fake driver's sources, tests/fakecuda/*.c and the
// C++ *.cc (host builds of the CUDA kernels, which gcc compiles as C++ and which need no
// C++ runtime), sorted.
func Sources() ([]string, error) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "tests", "fakecuda")
	srcs, err := filepath.Glob(filepath.Join(dir, "*.c"))
	if err == nil {
		var cc []string
		cc, err = filepath.Glob(filepath.Join(dir, "*.cc"))
		srcs = append(srcs, cc...)
	}
	if err == nil && len(srcs) == 0 {
		err = fmt.Errorf("no fake CUDA driver sources in %s", dir)
	}
	return srcs, err
}

// Build compiles the fake driver into a temporary directory of t and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	path, err := BuildIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BuildIn compiles the fake driver into dir and returns its path.
func BuildIn(dir string) (string, error) { return BuildWithout(dir) }

// BuildWithout is BuildIn for a fake that does not export the entry points hidden (a
// driver older than the one gonccl's optional calls need): the dynamic loader does not
// find them, and the fake's own calls of them still work.
func BuildWithout(dir string, hidden ...string) (string, error) {
	srcs, err := Sources()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "libfakecuda.so")
	args := []string{"-shared", "-fPIC", "-O1", "-Wall", "-pthread", "-o", out}
	if len(hidden) > 0 {
		script := filepath.Join(dir, "fakecuda-hidden.map")
		text := "{ global: *; local: " + strings.Join(hidden, "; ") + "; };\n"
		if err := os.WriteFile(script, []byte(text), 0o644); err != nil {
			return "", err
		}
		args = append(args, "-Wl,--version-script="+script)
	}
	args = append(args, srcs...)
	cmd := exec.Command("gcc", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the fake CUDA driver: %v\n%s", err, b)
	}
	return out, nil
}

// Fake is the fake driver's test hooks.
type Fake struct{ h *C.hooks }

// Counters mirrors fakecudaCounters.
type Counters struct {
	DtoH, HtoD, Kernels, HostAllocs, HostFrees, HostLive, EventsCreated, EventsDestroyed,
	BadAccess, HostRaces, ContextErrors, StaleReads, CapturedOps, PrimaryRetained int
	PrimaryResets int
	GPUWaits      int // GPU-side waits another context may release (cuStreamWaitValue32, cross-context cuStreamWaitEvent)
	TSSwitches    int // FAKECUDA_TIMESLICE_US: turns this process took after another's
}

// Open reaches the hooks of the fake at path (the same loaded copy the driver uses).
func Open(path string) (*Fake, error) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	h := (*C.hooks)(C.calloc(1, C.size_t(unsafe.Sizeof(C.hooks{}))))
	if r := C.openHooks(cp, h); r != 0 {
		return nil, fmt.Errorf("opening fake CUDA hooks in %s: %d", path, int(r))
	}
	return &Fake{h: h}, nil
}

// Malloc returns n bytes of "device" memory of device dev.
func (f *Fake) Malloc(dev, n int) uintptr { return uintptr(C.hMalloc(f.h, C.int(dev), C.size_t(n))) }

// Free frees (and poisons) device memory.
func (f *Fake) Free(p uintptr) error {
	if C.hFree(f.h, C.uintptr_t(p)) != 0 {
		return fmt.Errorf("fakecudaFree(%#x) failed", p)
	}
	return nil
}

// HardwareQueues is the number of hardware queues each context's streams share in
// this process (CUDA_DEVICE_MAX_CONNECTIONS when the first stream was made, default 8).
func (f *Fake) HardwareQueues() int { return int(C.hQueues(f.h)) }

// Stream creates a stream on device dev.
func (f *Fake) Stream(dev int) uintptr { return uintptr(C.hStream(f.h, C.int(dev))) }

// Special stream handles, resolved on the calling thread (which needs a current
// context: SetCurrent).
const (
	StreamLegacy    = 0x1 // CU_STREAM_LEGACY: the legacy default stream
	StreamPerThread = 0x2 // CU_STREAM_PER_THREAD: the calling thread's default stream
)

// NonBlockingStream creates a stream on device dev that does not synchronize with
// the legacy default stream (CU_STREAM_NON_BLOCKING, like torch's streams).
func (f *Fake) NonBlockingStream(dev int) uintptr { return uintptr(C.hStreamFlags(f.h, C.int(dev), 1)) }

// Capture starts (on) or ends stream capture on s, in global mode (torch.cuda.graph's
// default) on the calling thread: meanwhile nothing queued on s runs, and a potentially
// unsafe call of any thread not in relaxed mode invalidates it (ending it then fails).
func (f *Fake) Capture(s uintptr, on bool) error {
	flag := C.int(0)
	if on {
		flag = 1
	}
	switch C.hCapture(f.h, C.uintptr_t(s), flag) {
	case 0:
	case -2:
		return fmt.Errorf("the fake stream capture on %#x was invalidated: a thread not in relaxed capture mode made a potentially unsafe call meanwhile (the fakecuda line on stderr names it)", s)
	default:
		return fmt.Errorf("fake stream capture on %#x failed", s)
	}
	return nil
}

// Check queues a consumer that counts a stale read (Counters.StaleReads) if any of n
// float32s at p differs from want when it runs.
func (f *Fake) Check(s, p uintptr, n int, want float32, delayUs uint) error {
	if C.hCheck(f.h, C.uintptr_t(s), C.uintptr_t(p), C.size_t(n), C.float(want), C.uint(delayUs)) != 0 {
		return fmt.Errorf("fakecudaCheckF32 failed")
	}
	return nil
}

// SetCurrent makes context ctx current on the calling OS thread (lock it first).
func (f *Fake) SetCurrent(ctx uintptr) { C.hSetCurrent(f.h, C.uintptr_t(ctx)) }

// Context returns device dev's context.
func (f *Fake) Context(dev int) uintptr { return uintptr(C.hContext(f.h, C.int(dev))) }

// SetDelay sets the random delay of every queued operation.
func (f *Fake) SetDelay(minUs, maxUs uint) { C.hSetDelay(f.h, C.uint(minUs), C.uint(maxUs)) }

// SetCopyRate makes host<->device copies also take their size at mibPerS MiB/s, sleeping
// (0: no such time).
func (f *Fake) SetCopyRate(mibPerS uint) { C.hSetCopyRate(f.h, C.uint(mibPerS)) }

// Fill queues a kernel that sets n float32s at p to v after delayUs.
func (f *Fake) Fill(s, p uintptr, n int, v float32, delayUs uint) error {
	if C.hFill(f.h, C.uintptr_t(s), C.uintptr_t(p), C.size_t(n), C.float(v), C.uint(delayUs)) != 0 {
		return fmt.Errorf("fakecudaFillF32 failed")
	}
	return nil
}

// Add queues a kernel that adds v to n float32s at p after delayUs.
func (f *Fake) Add(s, p uintptr, n int, v float32, delayUs uint) error {
	if C.hAdd(f.h, C.uintptr_t(s), C.uintptr_t(p), C.size_t(n), C.float(v), C.uint(delayUs)) != 0 {
		return fmt.Errorf("fakecudaAddF32 failed")
	}
	return nil
}

// Drain waits until stream s is idle.
func (f *Fake) Drain(s uintptr) { C.hDrain(f.h, C.uintptr_t(s)) }

// Floats reads n float32s of device memory p (host memory in the fake).
func (f *Fake) Floats(p uintptr, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(C.hRead(C.uintptr_t(p), C.size_t(i)))
	}
	return out
}

// SetFloats writes vals to device memory p directly (no stream).
func (f *Fake) SetFloats(p uintptr, vals []float32) {
	for i, v := range vals {
		C.hWrite(C.uintptr_t(p), C.size_t(i), C.float(v))
	}
}

// Counters returns the fake's counters.
func (f *Fake) Counters() Counters {
	var c C.counters
	C.hCounters(f.h, &c)
	return Counters{int(c.dtoh), int(c.htod), int(c.kernels), int(c.host_allocs), int(c.host_frees), int(c.host_live),
		int(c.events_created), int(c.events_destroyed), int(c.bad_access), int(c.host_races), int(c.context_errors),
		int(c.stale_reads), int(c.captured_ops), int(c.primary_retained), int(c.primary_resets),
		int(c.gpu_waits), int(c.ts_switches)}
}

// Bytes views n bytes of device memory p (host memory in the fake) without copying.
func (f *Fake) Bytes(p uintptr, n int) []byte {
	if n == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(C.hPtr(C.uintptr_t(p))), n)
}

// RuntimeInit takes the CUDA runtime's reference on device dev's primary context (as
// torch's first CUDA call does; Context, Stream and Malloc imply it).
func (f *Fake) RuntimeInit(dev int) error {
	if C.hRuntime(f.h, C.int(dev), 1) != 0 {
		return fmt.Errorf("fakecudaRuntimeInit(%d) failed", dev)
	}
	return nil
}

// RuntimeRelease drops the runtime's reference (cudaDeviceReset, or the runtime's
// teardown at exit): with none left, the context is reset and everything in it dies.
func (f *Fake) RuntimeRelease(dev int) error {
	if C.hRuntime(f.h, C.int(dev), 0) != 0 {
		return fmt.Errorf("fakecudaRuntimeRelease(%d): the runtime held no reference", dev)
	}
	return nil
}

// PoolStream returns the next of device dev's 32 pool streams, round-robin, as torch's
// getStreamFromPool does: callers may share one.
func (f *Fake) PoolStream(dev int) uintptr { return uintptr(C.hPoolStream(f.h, C.int(dev))) }
