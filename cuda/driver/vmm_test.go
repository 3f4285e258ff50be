package driver_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

const (
	cuOK           = 0
	cuInvalidValue = 1
	cuNotPermitted = 800
)

// TestFakeVMMFollowsTheDriversRules: the fake's cuMemCreate family refuses what the
// driver refuses (sizes, offsets and addresses off the granularity, a partial unmap,
// freeing addresses still mapped, exporting memory not made exportable, importing a
// file that is not exported device memory), and memory mapped without access set is
// not device memory yet: a copy from it is refused when queued.
func TestFakeVMMFollowsTheDriversRules(t *testing.T) {
	d, f := cudatest.Load(t)
	v, err := cudatest.OpenVMM(cudatest.Path(t))
	require.NoError(t, err)
	const g = cudatest.Granularity
	ctx := driver.Context(f.Context(0))
	s := f.Stream(0)
	require.NoError(t, d.Do(ctx, func() error {
		_, r := v.Create(g+4096, 0, true)
		require.Equal(t, cuInvalidValue, r, "a size off the granularity")
		h, r := v.Create(2*g, 0, true)
		require.Equal(t, cuOK, r)
		p, r := v.Reserve(2 * g)
		require.Equal(t, cuOK, r)
		require.Equal(t, cuInvalidValue, v.Map(p, g, 4096, h), "an offset off the granularity")
		require.Equal(t, cuInvalidValue, v.Map(p+4096, g, 0, h), "an address off the granularity")
		require.Equal(t, cuInvalidValue, v.Map(p, 3*g, 0, h), "more than the allocation (and the reservation)")
		require.Equal(t, cuOK, v.Map(p, 2*g, 0, h))
		require.Equal(t, cuInvalidValue, v.Map(p, g, 0, h), "mapped already")

		dst := f.Malloc(0, 4096)
		require.Equal(t, cuInvalidValue, v.Copy(dst, p, 4096, s), "mapped, but no access set: not device memory yet")
		require.Equal(t, cuOK, v.SetAccess(p, 2*g, 0, 3))
		require.Equal(t, cuOK, v.Copy(dst, p, 4096, s))
		f.Drain(s)

		require.Equal(t, cuInvalidValue, v.Unmap(p, g), "a part of a mapping")
		require.Equal(t, cuInvalidValue, v.AddressFree(p, 2*g), "addresses still mapped")

		plain, r := v.Create(g, 0, false)
		require.Equal(t, cuOK, r)
		_, r = v.Export(plain)
		require.Equal(t, cuNotPermitted, r, "made without the file descriptor handle type")
		require.Equal(t, cuOK, v.Release(plain))
		require.Equal(t, cuInvalidValue, v.Release(plain), "released twice")

		mfd, err := unix.MemfdCreate("not-device-memory", unix.MFD_CLOEXEC)
		require.NoError(t, err)
		require.NoError(t, unix.Ftruncate(mfd, g))
		_, r = v.Import(mfd)
		require.Equal(t, cuInvalidValue, r, "a file that is not exported device memory")
		require.NoError(t, unix.Close(mfd))

		require.Equal(t, cuOK, v.Release(h))
		require.Equal(t, cuOK, v.Copy(dst, p, 4096, s), "released, but still mapped: still there")
		f.Drain(s)
		require.Equal(t, cuOK, v.Unmap(p, 2*g))
		require.Equal(t, cuInvalidValue, v.Copy(dst, p, 4096, s), "unmapped")
		require.Equal(t, cuOK, v.AddressFree(p, 2*g))
		return f.Free(dst)
	}))
}

// TestSharedMemoryOutlivesItsMaker: memory made with MemCreateExported and mapped
// again from its file descriptor stays there, contents and all, after its maker has
// unmapped it and closed the descriptor; it is freed when the last mapping goes.
func TestSharedMemoryOutlivesItsMaker(t *testing.T) {
	d, f := cudatest.Load(t)
	ctx0, ctx1 := driver.Context(f.Context(0)), driver.Context(f.Context(1))
	before, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	var e driver.Exported
	require.NoError(t, d.Do(ctx0, func() (err error) { e, err = d.MemCreateExported(0, 5000); return err }))
	require.Equal(t, cudatest.Granularity, e.Size, "rounded up to the granularity")
	f.SetFloats(e.Ptr, []float32{1, 2, 3})
	var there uintptr
	require.NoError(t, d.Do(ctx1, func() (err error) { there, err = d.MemImportFD(e.FD, e.Size, 1); return err }))
	require.NoError(t, unix.Close(e.FD))
	require.NoError(t, d.Do(ctx0, func() error { return d.MemUnmapShared(e.Ptr, e.Size) }))
	mid, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	require.Equal(t, 1, mid.Sub(before).DevAllocs)
	require.Equal(t, 1, mid.Sub(before).IpcOpens)
	require.Zero(t, mid.Sub(before).IpcCloses, "the importer still maps it")
	require.Equal(t, []float32{1, 2, 3}, f.Floats(there, 3), "what its maker wrote")
	require.NoError(t, d.Do(ctx1, func() error { return d.MemUnmapShared(there, e.Size) }))
	after, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	require.Equal(t, 1, after.Sub(before).DevFrees)
	require.Equal(t, 1, after.Sub(before).IpcCloses)
}
