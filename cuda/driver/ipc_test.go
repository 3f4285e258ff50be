package driver_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// The fake's device memory is strict like the rest of it: cuMemFree waits for the
// context's queued work (as the real one does), so a copy queued before it runs first
// and touches no freed memory; a copy queued after it is refused, a freed allocation
// cannot be exported, and a handle cannot be opened in the process that exported it
// (as CUDA refuses).
func TestFakeDeviceMemoryUseAfterFree(t *testing.T) {
	d, f := cudatest.Load(t)
	ctx := driver.Context(f.Context(0))
	s := driver.Stream(f.Stream(0))
	src, err := d.MemAllocIn(ctx, 4096)
	require.NoError(t, err)
	dst, err := d.MemAllocIn(ctx, 4096)
	require.NoError(t, err)

	var ce *driver.Error
	err = ipcRoundTrip(d, ctx, src)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "CUDA_ERROR_INVALID_CONTEXT", ce.Name, "opening a handle in its exporting process")

	before := f.Counters().BadAccess
	f.SetDelay(20000, 20000) // the copy runs 20 ms after it is queued
	require.NoError(t, d.CopyDevice(ctx, dst, src, 4096, s))
	start := time.Now()
	require.NoError(t, d.MemFreeIn(ctx, src))
	require.GreaterOrEqual(t, time.Since(start), 15*time.Millisecond, "cuMemFree waited for the queued copy")
	f.Drain(uintptr(s))
	f.SetDelay(0, 200)
	require.Equal(t, before, f.Counters().BadAccess, "the copy ran before the free")

	err = d.CopyDevice(ctx, dst, src, 4096, s)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "CUDA_ERROR_INVALID_VALUE", ce.Name, "a copy from freed memory is refused when queued")
	err = ipcRoundTrip(d, ctx, src)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "CUDA_ERROR_INVALID_VALUE", ce.Name, "a freed allocation cannot be exported")
	require.Error(t, d.MemFreeIn(ctx, src), "double free")
	require.NoError(t, d.MemFreeIn(ctx, dst))
}

// ipcRoundTrip exports p and opens the handle in ctx (in this process).
func ipcRoundTrip(d *driver.Driver, ctx driver.Context, p uintptr) error {
	return d.Do(ctx, func() error {
		h, err := d.IpcGetMemHandle(p)
		if err != nil {
			return err
		}
		_, err = d.IpcOpenMemHandle(h)
		return err
	})
}

// TestFakeIpcOpenTakesOnlyTheLazyPeerFlag: cuIpcOpenMemHandle's flags must be
// CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, as the driver documents: 0 is refused
// (CUDA_ERROR_INVALID_VALUE) before anything else is looked at, while with the flag
// the same handle gets as far as the exporting process's refusal
// (CUDA_ERROR_INVALID_CONTEXT). Before, the fake ignored the flags.
func TestFakeIpcOpenTakesOnlyTheLazyPeerFlag(t *testing.T) {
	d, f := cudatest.Load(t)
	ctx := driver.Context(f.Context(0))
	p, err := d.MemAllocIn(ctx, 4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, d.MemFreeIn(ctx, p)) }()
	require.NoError(t, d.Do(ctx, func() error {
		h, err := d.IpcGetMemHandle(p)
		require.NoError(t, err)
		_, r := cudatest.IpcOpenRaw(cudatest.Path(t), h, 0)
		require.Equal(t, 1, r, "flags 0")
		_, r = cudatest.IpcOpenRaw(cudatest.Path(t), h, 3)
		require.Equal(t, 1, r, "an unknown flag")
		_, r = cudatest.IpcOpenRaw(cudatest.Path(t), h, 1)
		require.Equal(t, 201, r, "CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, in the exporting process")
		return nil
	}))
}
