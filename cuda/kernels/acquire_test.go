package kernels_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/internal/reduce"
)

// TestLastReleaseUnloads: the module a context's kernels live in stays loaded while
// any holder has them (Acquire), is unloaded (cuModuleUnload) by the last Release, and
// a later Acquire loads it afresh.
func TestLastReleaseUnloads(t *testing.T) {
	path := cudatest.Build(t)
	d, err := driver.Open(path)
	require.NoError(t, err)
	f, err := cudatest.Open(path)
	require.NoError(t, err)
	ctx := driver.Context(f.Context(3))
	calls := func() cudatest.Calls {
		c, err := cudatest.CallsAt(path)
		require.NoError(t, err)
		return c
	}
	a, err := kernels.Acquire(d, ctx)
	require.NoError(t, err)
	b, err := kernels.Acquire(d, ctx)
	require.NoError(t, err)
	require.Same(t, a, b, "one module per context")
	before := calls()
	require.NoError(t, a.Release())
	require.Zero(t, calls().Sub(before)["cuModuleUnload"], "unloaded while a holder has the kernels")
	require.NoError(t, b.Release())
	require.Equal(t, 1, calls().Sub(before)["cuModuleUnload"], "the last Release")
	c, err := kernels.Acquire(d, ctx)
	require.NoError(t, err)
	require.NotSame(t, a, c, "the unloaded module came back from the cache")
	require.Equal(t, 1, calls().Sub(before)["cuModuleLoadData"], "loaded afresh")
	require.NoError(t, c.Release())
}

// TestResetContextLoadsAfresh: a primary context reset (its last reference released)
// and retained again comes back with the same handle, and without any module loaded
// in it before; a holder may still have the old kernels (a communicator whose context
// was reset under it). Kernels acquired in the new context must be loaded afresh and
// launch; a cache keyed by the handle alone hands back the dead module, whose launch
// the driver refuses (the fake as CUDA_ERROR_INVALID_HANDLE).
func TestResetContextLoadsAfresh(t *testing.T) {
	path := cudatest.Build(t)
	d, err := driver.Open(path)
	require.NoError(t, err)
	f, err := cudatest.Open(path)
	require.NoError(t, err)
	const dev = 5
	ctx, err := d.RetainPrimary(dev)
	require.NoError(t, err)
	old, err := kernels.Acquire(d, ctx)
	require.NoError(t, err)
	require.NoError(t, d.ReleasePrimary(dev), "the reset")
	again, err := d.RetainPrimary(dev)
	require.NoError(t, err)
	defer d.ReleasePrimary(dev)
	require.Equal(t, ctx, again, "the fake gives a primary context the same handle after a reset")
	k, err := kernels.Acquire(d, again)
	require.NoError(t, err)
	defer k.Release()
	require.True(t, old != k, "the module that died with the reset came back from the cache")
	const count = 256
	dst, err := d.MemAllocIn(again, 4*count)
	require.NoError(t, err)
	defer d.MemFreeIn(again, dst)
	src, err := d.MemAllocIn(again, 4*count)
	require.NoError(t, err)
	defer d.MemFreeIn(again, src)
	ones := make([]float32, count)
	for i := range ones {
		ones[i] = 1
	}
	f.SetFloats(dst, ones)
	f.SetFloats(src, ones)
	s := driver.Stream(f.Stream(dev))
	require.NoError(t, d.Do(again, func() error {
		if err := k.ReduceInto(s, dst, src, count, reduce.Float32, reduce.Sum); err != nil {
			return err
		}
		return d.Sync(s)
	}))
	require.Equal(t, float32(2), f.Floats(dst, count)[count-1])
	require.NoError(t, old.Release(), "the holder of the old kernels gives them back")
}
