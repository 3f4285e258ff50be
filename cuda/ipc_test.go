package cuda_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda"
)

// The fake's device memory is strict like the rest of it: cuMemFree waits for the
// context's queued work (as the real one does), so a copy queued before it runs first
// and touches no freed memory; a copy queued after it is refused, a freed allocation
// cannot be exported, and a handle cannot be opened in the process that exported it
// (as CUDA refuses).
func TestFakeDeviceMemoryUseAfterFree(t *testing.T) {
	d, f := open(t)
	ctx := cuda.Context(f.Context(0))
	s := cuda.Stream(f.Stream(0))
	src, err := d.MemAllocIn(ctx, 4096)
	require.NoError(t, err)
	dst, err := d.MemAllocIn(ctx, 4096)
	require.NoError(t, err)

	var ce *cuda.Error
	err = d.IpcRoundTripIn(ctx, src)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "CUDA_ERROR_INVALID_CONTEXT", ce.Name, "opening a handle in its exporting process")

	before := f.Counters().BadAccess
	f.SetDelay(20000, 20000) // the copy runs 20 ms after it is queued
	require.NoError(t, d.CopyDtoDIn(ctx, s, dst, src, 4096))
	start := time.Now()
	require.NoError(t, d.MemFreeIn(ctx, src))
	require.GreaterOrEqual(t, time.Since(start), 15*time.Millisecond, "cuMemFree waited for the queued copy")
	f.Drain(uintptr(s))
	f.SetDelay(0, 200)
	require.Equal(t, before, f.Counters().BadAccess, "the copy ran before the free")

	err = d.CopyDtoDIn(ctx, s, dst, src, 4096)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "CUDA_ERROR_INVALID_VALUE", ce.Name, "a copy from freed memory is refused when queued")
	err = d.IpcRoundTripIn(ctx, src)
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "CUDA_ERROR_INVALID_VALUE", ce.Name, "a freed allocation cannot be exported")
	require.Error(t, d.MemFreeIn(ctx, src), "double free")
	require.NoError(t, d.MemFreeIn(ctx, dst))
}
