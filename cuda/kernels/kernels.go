package kernels

/*
#include <stdint.h>
#include <stdlib.h>

typedef int CUresult;
typedef CUresult (*gkLoadFn)(void**, const void*);
typedef CUresult (*gkUnloadFn)(void*);
typedef CUresult (*gkGetFn)(void**, void*, const char*);
typedef CUresult (*gkLaunchFn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, void*, void**, void**);

// The entry points come from the driver's table (driver.go) as plain pointers.
static CUresult gkModuleLoad(void* fn, const void* image, uintptr_t* mod) {
  void* m = NULL;
  CUresult r = ((gkLoadFn)fn)(&m, image);
  *mod = (uintptr_t)m;
  return r;
}
static CUresult gkModuleUnload(void* fn, uintptr_t mod) { return ((gkUnloadFn)fn)((void*)mod); }
static CUresult gkGetFunction(void* fn, uintptr_t mod, const char* name, uintptr_t* f) {
  void* p = NULL;
  CUresult r = ((gkGetFn)fn)(&p, (void*)mod, name);
  *f = (uintptr_t)p;
  return r;
}
// The kernels' parameters, as reduce.cu declares them.
static CUresult gkLaunchReduce(void* fn, uintptr_t f, unsigned grid, unsigned block, uintptr_t s,
                               uintptr_t dst, uintptr_t src, unsigned long long count, uintptr_t abort) {
  void* d = (void*)dst;
  void* sp = (void*)src;
  unsigned long long c = count;
  const unsigned* w = (const unsigned*)abort;
  void* params[4] = {&d, &sp, &c, &w};
  return ((gkLaunchFn)fn)((void*)f, grid, 1, 1, block, 1, 1, 0, (void*)s, params, NULL);
}
// gkMultiArgs is gk::MultiArgs of cuda/kernels/multi.cuh, the one-pass kernels' only
// parameter, passed by value.
#define GK_MULTI_MAX 8
typedef struct {
  const void* in[GK_MULTI_MAX];
  void* out[GK_MULTI_MAX];
  unsigned long long count;
  int nin, nout;
  long long div;
  const unsigned* abort;
} gkMultiArgs;
_Static_assert(sizeof(gkMultiArgs) == 160, "gkMultiArgs is not multi.cuh's MultiArgs");
static CUresult gkLaunchMulti(void* fn, uintptr_t f, unsigned grid, unsigned block, uintptr_t s,
                              const uintptr_t* ins, int nin, const uintptr_t* outs, int nout,
                              unsigned long long count, long long div, uintptr_t abort) {
  gkMultiArgs a = {0};
  for (int i = 0; i < nin; i++) a.in[i] = (const void*)ins[i];
  for (int i = 0; i < nout; i++) a.out[i] = (void*)outs[i];
  a.count = count;
  a.nin = nin;
  a.nout = nout;
  a.div = div;
  a.abort = (const unsigned*)abort;
  void* params[1] = {&a};
  return ((gkLaunchFn)fn)((void*)f, grid, 1, 1, block, 1, 1, 0, (void*)s, params, NULL);
}
static CUresult gkLaunchDivide(void* fn, uintptr_t f, unsigned grid, unsigned block, uintptr_t s,
                               uintptr_t buf, unsigned long long count, long long n) {
  void* b = (void*)buf;
  unsigned long long c = count;
  long long d = n;
  void* params[3] = {&b, &c, &d};
  return ((gkLaunchFn)fn)((void*)f, grid, 1, 1, block, 1, 1, 0, (void*)s, params, NULL);
}
*/
import "C"

import (
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/reduce"
)

// fatbin is the reduction kernels of cuda/kernels, prebuilt by `make kernels`
// (scripts/build-kernels.sh): SASS for sm_80 and sm_90, PTX for newer GPUs.
//
//go:embed gonccl_kernels.fatbin
var fatbin []byte

// Launch shape: blocks of blockThreads threads, each thread taking one 16-byte pack per
// step of its grid-stride loop; past maxBlocks blocks (enough to fill any current GPU)
// threads take several packs.
const (
	blockThreads = 256
	maxBlocks    = 2048
)

// kernelKey names one kernel: a reduction (dt, op), with div dt's division, with
// multi the one-pass reduction of many buffers (dt, op; avg its own).
type kernelKey struct {
	dt    reduce.DataType
	op    reduce.RedOp
	div   bool
	multi bool
}

// MaxReduceOperands is how many inputs, and how many outputs, one ReduceMany takes
// (GK_MULTI_MAX of cuda/kernels/multi.cuh).
const MaxReduceOperands = 8

// Kernels is gonccl's reduction kernels loaded into one CUDA context.
type Kernels struct {
	d   *driver.Driver
	ctx driver.Context
	key loadedKey
	mod uintptr
	fns map[kernelKey]uintptr // read-only once loaded
	// refs counts the holders Acquire gave k to (loadedKernels.mu): the last Release
	// unloads the module, before the context it lives in can go.
	refs int
}

var loadedKernels struct {
	mu sync.Mutex
	m  map[loadedKey]*Kernels
}

// loadedKey is a context as the cache knows it: its handle and the driver's id of it
// (cuCtxGetId), since a primary context reset and retained again comes back with the
// same handle and none of its modules. Where the driver has no ids (before CUDA 12.0)
// the handle alone, and the last Release or Unload, keep the cache right.
type loadedKey struct {
	d   *driver.Driver
	ctx driver.Context
	id  uint64
}

func keyOf(d *driver.Driver, ctx driver.Context) loadedKey {
	id, _ := d.ContextID(ctx)
	return loadedKey{d, ctx, id}
}

// Load loads the embedded fatbin (cuModuleLoadData) into ctx once and caches it
// on d; later calls for ctx return the same Kernels until Unload. It resolves
// every kernel (cuModuleGetFunction) and loads it (cuFuncLoad, where the driver has
// it) up front: under lazy loading a first launch may wait for the whole context.
func Load(d *driver.Driver, ctx driver.Context) (*Kernels, error) {
	key := keyOf(d, ctx)
	loadedKernels.mu.Lock()
	defer loadedKernels.mu.Unlock()
	if k := loadedKernels.m[key]; k != nil {
		return k, nil
	}
	k := &Kernels{d: d, ctx: ctx, key: key, fns: make(map[kernelKey]uintptr)}
	e := d.Kernels()
	for _, f := range []struct {
		name string
		p    unsafe.Pointer
	}{{"cuModuleLoadData", e.ModuleLoadData}, {"cuModuleUnload", e.ModuleUnload}, {"cuModuleGetFunction", e.ModuleGetFunction}, {"cuLaunchKernel", e.LaunchKernel}} {
		if f.p == nil {
			return nil, d.Check(f.name, driver.MissingEntry)
		}
	}
	err := d.DoRelaxed(ctx, func() error {
		image := C.CBytes(fatbin)
		defer C.free(image)
		var mod C.uintptr_t
		if err := d.Check("cuModuleLoadData", int(C.gkModuleLoad(d.Kernels().ModuleLoadData, image, &mod))); err != nil {
			return err
		}
		k.mod = uintptr(mod)
		for _, kk := range kernelKeys() {
			name := kernelName(kk)
			cname := C.CString(name)
			var f C.uintptr_t
			r := C.gkGetFunction(d.Kernels().ModuleGetFunction, mod, cname, &f)
			C.free(unsafe.Pointer(cname))
			if err := d.Check("cuModuleGetFunction", int(r)); err != nil {
				err.(*driver.Error).What = name
				C.gkModuleUnload(d.Kernels().ModuleUnload, mod)
				return err
			}
			if err := d.FuncLoad(uintptr(f)); err != nil {
				err.(*driver.Error).What = name
				C.gkModuleUnload(d.Kernels().ModuleUnload, mod)
				return err
			}
			k.fns[kk] = uintptr(f)
		}
		return nil
	})
	if err != nil {
		var ce *driver.Error
		if errors.As(err, &ce) && ce.Func == "cuModuleLoadData" {
			switch ce.Code {
			case 200, 209, 218, 222: // CUDA_ERROR_INVALID_IMAGE, _NO_BINARY_FOR_GPU, _INVALID_PTX, _UNSUPPORTED_PTX_VERSION
				return nil, fmt.Errorf("cuda: loading the reduction kernels (built with CUDA 13.0 for sm_80 and sm_90, "+
					"PTX for compute_90: they need an R580 driver or newer and a GPU of compute capability 8.0 or more): %w", err)
			}
		}
		return nil, fmt.Errorf("cuda: loading the reduction kernels: %w", err)
	}
	if loadedKernels.m == nil {
		loadedKernels.m = make(map[loadedKey]*Kernels)
	}
	loadedKernels.m[key] = k
	driver.LogInfo(fmt.Sprintf("loaded %d reduction kernels (%d-byte fatbin) into context %#x", len(k.fns), len(fatbin), uintptr(ctx)))
	return k, nil
}

// Acquire is Load for a holder that gives the kernels back with Release once it has no
// work queued with them: the module lives as long as its holders, and is unloaded with
// the last, so that a context released after it (and a new context that may come back
// with the same handle) never meets a stale module. A communicator holds the kernels of
// each context it used them in.
func Acquire(d *driver.Driver, ctx driver.Context) (*Kernels, error) {
	k, err := Load(d, ctx)
	if err != nil {
		return nil, err
	}
	loadedKernels.mu.Lock()
	k.refs++
	loadedKernels.mu.Unlock()
	return k, nil
}

// Release gives back kernels Acquire gave: the last holder's Release unloads the module
// (cuModuleUnload), unless Unload already did.
func (k *Kernels) Release() error {
	loadedKernels.mu.Lock()
	k.refs--
	last := k.refs == 0 && loadedKernels.m[k.key] == k
	if last {
		delete(loadedKernels.m, k.key)
	}
	loadedKernels.mu.Unlock()
	if !last {
		return nil
	}
	return k.unload()
}

// unload unloads k's module.
func (k *Kernels) unload() error {
	return k.d.Do(k.ctx, func() error {
		return k.d.Check("cuModuleUnload", int(C.gkModuleUnload(k.d.Kernels().ModuleUnload, C.uintptr_t(k.mod))))
	})
}

// Unload unloads the kernels Load loaded into ctx (cuModuleUnload), if
// any, once no work queued with them is pending. Call it before the last reference to
// ctx goes (a released primary context may come back with the same handle).
func Unload(d *driver.Driver, ctx driver.Context) error {
	key := keyOf(d, ctx)
	loadedKernels.mu.Lock()
	k := loadedKernels.m[key]
	delete(loadedKernels.m, key)
	loadedKernels.mu.Unlock()
	if k == nil {
		return nil
	}
	return k.unload()
}

// ReduceInto enqueues on s: dst[i] = dst[i] op src[i], i < count, elements of dt, device
// pointers; exactly internal/reduce.ReduceInto's semantics (ints wrap, NaN propagates for
// min/max, fp16/bf16 round to nearest even, Bool reads non-zero as true and writes 0/1,
// Avg reduces as Sum). dst and src may be the same but must not partially overlap. The
// caller has the kernels' context current (driver.Driver.Do). Unsupported (dt, op): an error
// naming both, wrapping reduce's sentinel.
func (k *Kernels) ReduceInto(s driver.Stream, dst, src uintptr, count int, dt reduce.DataType, op reduce.RedOp) error {
	return k.ReduceIntoUnless(s, dst, src, count, dt, op, 0)
}

// ReduceIntoUnless is ReduceInto for a src (or dst) that is another rank's memory: the
// kernel first reads the 32-bit abort word at device address abort (host memory the GPU
// maps, which the host sets once the communicator has failed) and, if it is set, returns
// without touching dst or src. abort 0 is a word never set (ReduceInto).
func (k *Kernels) ReduceIntoUnless(s driver.Stream, dst, src uintptr, count int, dt reduce.DataType, op reduce.RedOp, abort uintptr) error {
	if err := reduce.CheckReduction(dt, op); err != nil {
		return fmt.Errorf("cuda: no %v reduction kernel for %v: %w", op, dt, err)
	}
	if err := checkRange("ReduceInto", count, dst, src); err != nil || count == 0 {
		return err
	}
	f := k.fns[reduceKey(dt, op)]
	grid := gridFor(count, dt.Size())
	return k.d.Check("cuLaunchKernel", int(C.gkLaunchReduce(k.d.Kernels().LaunchKernel, C.uintptr_t(f),
		C.uint(grid), blockThreads, C.uintptr_t(s), C.uintptr_t(dst), C.uintptr_t(src), C.ulonglong(count), C.uintptr_t(abort))))
}

// DivideBy enqueues on s: buf[i] /= n, internal/reduce.DivideBy's semantics (floats
// divide and round, integers truncate toward zero). The caller has the kernels' context
// current.
func (k *Kernels) DivideBy(s driver.Stream, buf uintptr, count int, dt reduce.DataType, n int) error {
	if err := reduce.CheckReduction(dt, reduce.Avg); err != nil {
		return fmt.Errorf("cuda: no division kernel for %v (avg): %w", dt, err)
	}
	if n <= 0 {
		return fmt.Errorf("%w: cuda: DivideBy: divisor %d is not positive", reduce.ErrInvalidArgument, n)
	}
	if err := checkRange("DivideBy", count, buf); err != nil || count == 0 {
		return err
	}
	f := k.fns[kernelKey{dt: dt, div: true}]
	grid := gridFor(count, dt.Size())
	return k.d.Check("cuLaunchKernel", int(C.gkLaunchDivide(k.d.Kernels().LaunchKernel, C.uintptr_t(f),
		C.uint(grid), blockThreads, C.uintptr_t(s), C.uintptr_t(buf), C.ulonglong(count), C.longlong(n))))
}

// ReduceMany enqueues on s one pass over memory: every outs[j][i] = ins[0][i] op
// ins[1][i] op ... op ins[len(ins)-1][i], i < count, folded in that order and rounded
// at each step exactly as a chain of ReduceInto calls would (for avg: the sum, then
// divided by len(ins), as DivideBy would), each input read once and each output written
// once. 1 to MaxReduceOperands inputs, 1 to MaxReduceOperands outputs. An output may be
// one of the inputs but must not partially overlap any other buffer. The caller has the
// kernels' context current.
func (k *Kernels) ReduceMany(s driver.Stream, outs, ins []uintptr, count int, dt reduce.DataType, op reduce.RedOp) error {
	return k.ReduceManyUnless(s, outs, ins, count, dt, op, 0)
}

// ReduceManyUnless is ReduceMany for buffers of other ranks: the kernel touches none of
// them once the abort word at abort is set (ReduceIntoUnless). abort 0: ReduceMany.
func (k *Kernels) ReduceManyUnless(s driver.Stream, outs, ins []uintptr, count int, dt reduce.DataType, op reduce.RedOp, abort uintptr) error {
	if err := reduce.CheckReduction(dt, op); err != nil {
		return fmt.Errorf("cuda: no %v one-pass reduction kernel for %v: %w", op, dt, err)
	}
	if len(ins) < 1 || len(ins) > MaxReduceOperands || len(outs) < 1 || len(outs) > MaxReduceOperands {
		return fmt.Errorf("%w: cuda: ReduceMany: %d inputs and %d outputs (1 to %d of each)",
			reduce.ErrInvalidArgument, len(ins), len(outs), MaxReduceOperands)
	}
	if err := checkRange("ReduceMany", count, ins...); err != nil || count == 0 {
		return err
	}
	if err := checkRange("ReduceMany", count, outs...); err != nil {
		return err
	}
	var in, out [MaxReduceOperands]C.uintptr_t
	for i, p := range ins {
		in[i] = C.uintptr_t(p)
	}
	for i, p := range outs {
		out[i] = C.uintptr_t(p)
	}
	f := k.fns[multiKey(dt, op)]
	grid := gridFor(count, dt.Size())
	return k.d.Check("cuLaunchKernel", int(C.gkLaunchMulti(k.d.Kernels().LaunchKernel, C.uintptr_t(f),
		C.uint(grid), blockThreads, C.uintptr_t(s), &in[0], C.int(len(ins)), &out[0], C.int(len(outs)),
		C.ulonglong(count), C.longlong(len(ins)), C.uintptr_t(abort))))
}

// checkRange refuses a negative count and, for a non-empty range, null pointers.
func checkRange(fn string, count int, ptrs ...uintptr) error {
	if count < 0 {
		return fmt.Errorf("%w: cuda: %s: negative count %d", reduce.ErrInvalidArgument, fn, count)
	}
	for _, p := range ptrs {
		if p == 0 && count > 0 {
			return fmt.Errorf("%w: cuda: %s: null device pointer", reduce.ErrInvalidArgument, fn)
		}
	}
	return nil
}

// gridFor is the number of blocks for count elements of size bytes: one 16-byte pack
// per thread, at most maxBlocks.
func gridFor(count, size int) int {
	per := max(16/size, 1)
	blocks := ((count+per-1)/per + blockThreads - 1) / blockThreads
	return min(max(blocks, 1), maxBlocks)
}
