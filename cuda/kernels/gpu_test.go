package kernels_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
)

// realMem is pinned host memory, which a GPU with unified addressing (every 64-bit Linux
// system) reaches at the same address: enough to run the kernels on a real GPU without
// device allocations.
type realMem struct {
	t    *testing.T
	d    *driver.Driver
	ptrs map[uintptr]unsafe.Pointer
}

func (m realMem) alloc(n int) uintptr {
	p, err := m.d.HostAlloc(n)
	require.NoError(m.t, err)
	m.ptrs[uintptr(p)] = p
	return uintptr(p)
}

func (m realMem) free(p uintptr) {
	require.NoError(m.t, m.d.HostFree(m.ptrs[p]))
	delete(m.ptrs, p)
}

func (m realMem) drain(s driver.Stream) { require.NoError(m.t, m.d.Sync(s)) }

// TestKernelsOnARealGPU runs the value sweeps (two-operand, division, one-pass) and the
// abort word's check on GPU 0 through the real driver
// (libcuda.so.1), where there is one; elsewhere it skips. The GPU check's machines have
// no Go: `make gpu-check-kernels` builds this package's test binary, and
// scripts/gpu-check.sh runs it there (its kernels-gpu step, part A) for this test alone.
func TestKernelsOnARealGPU(t *testing.T) {
	d, err := driver.Open(driver.DefaultLibrary)
	if err != nil {
		t.Skipf("no CUDA driver here: %v", err)
	}
	ctx, err := d.RetainPrimary(0)
	if err != nil {
		t.Skipf("no GPU 0: %v", err)
	}
	defer d.ReleasePrimary(0)
	k, err := kernels.Load(d, ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, kernels.Unload(d, ctx)) }()
	require.NoError(t, d.Do(ctx, func() error {
		mem := realMem{t: t, d: d, ptrs: map[uintptr]unsafe.Pointer{}}
		b := newBench(mem, k, driver.StreamLegacy)
		defer b.free()
		require.Equal(t, 97, b.sweepReduce(t))
		b.sweepDivide(t)
		mb := newMultiBench(mem, k, driver.StreamLegacy, 4200)
		defer mb.free()
		require.Equal(t, 97, mb.sweepMulti(t), "the one-pass kernels")
		checkAbortWord(t, mem, k, driver.StreamLegacy)
		return nil
	}))
}
