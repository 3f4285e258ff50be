package kernels_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
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
