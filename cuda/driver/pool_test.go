package driver_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// CUpointer_attribute values the test asks for.
const (
	attrMemoryType   = 2
	attrBufferID     = 7
	attrOrdinal      = 9
	attrLegacyIPC    = 10
	attrRangeStart   = 11
	attrRangeSize    = 12
	attrMempool      = 17
	memoryTypeDevice = 2
)

// TestFakePoolMemory: the fake makes stream-ordered pool memory (cudaMallocAsync,
// PyTorch's backend:cudaMallocAsync) as the driver's "Stream Ordered Memory Allocator"
// documents it: device memory whose pointer attributes answer (its device, its range,
// its pool; not legacy-IPC capable), which cuIpcGetMemHandle refuses (it takes only
// cuMemAlloc memory), freed in stream order (valid until the free runs, after the work
// queued before it), and whose addresses the pool hands out again with a new buffer
// id. Before, the fake had no cuMemAllocAsync at all.
func TestFakePoolMemory(t *testing.T) {
	d, f := cudatest.Load(t)
	p, err := cudatest.OpenPool(cudatest.Path(t))
	require.NoError(t, err)
	ctx := driver.Context(f.Context(0))
	s := f.Stream(0)
	require.NoError(t, d.Do(ctx, func() error {
		const n = 4096
		mem, r := p.Alloc(n, s)
		require.Equal(t, cuOK, r)
		plain, err := d.MemAlloc(n)
		require.NoError(t, err)
		defer func() { _ = d.MemFree(plain) }()

		for _, c := range []struct {
			attr int
			want uint64
			what string
		}{
			{attrMemoryType, memoryTypeDevice, "memory type"},
			{attrOrdinal, 0, "device"},
			{attrRangeStart, uint64(mem), "range start"},
			{attrRangeSize, n, "range size"},
			{attrLegacyIPC, 0, "legacy IPC capable"},
		} {
			v, r := p.Attr(mem+16, c.attr)
			require.Equal(t, cuOK, r, c.what)
			require.Equal(t, c.want, v, c.what)
		}
		pool, r := p.Attr(mem, attrMempool)
		require.Equal(t, cuOK, r)
		require.NotZero(t, pool, "pool memory names its pool")
		v, r := p.Attr(plain, attrMempool)
		require.Equal(t, cuOK, r)
		require.Zero(t, v, "cuMemAlloc memory has no pool")
		v, r = p.Attr(plain, attrLegacyIPC)
		require.Equal(t, cuOK, r)
		require.Equal(t, uint64(1), v, "cuMemAlloc memory is legacy-IPC capable")
		require.Equal(t, cuInvalidValue, p.IpcGet(mem), "cuIpcGetMemHandle takes only cuMemAlloc memory")
		require.Equal(t, cuOK, p.IpcGet(plain))

		// Freed in stream order: a slow kernel queued before the free still runs on
		// live memory, and the memory is valid until the free reaches its place.
		oldID, r := p.Attr(mem, attrBufferID)
		require.Equal(t, cuOK, r)
		before := f.Counters()
		require.NoError(t, f.Fill(s, mem, n/4, 5, 20000))
		require.Equal(t, cuOK, p.Free(mem, s))
		require.Equal(t, cuInvalidValue, p.Free(mem, s), "freed twice")
		_, r = p.Attr(mem, attrMemoryType)
		require.Equal(t, cuOK, r, "valid until the free runs")
		f.Drain(s)
		require.Equal(t, before.BadAccess, f.Counters().BadAccess, "the kernel queued before the free touched freed memory")
		_, r = p.Attr(mem, attrMemoryType)
		require.Equal(t, cuInvalidValue, r, "freed once the free ran")

		// Work that reaches it after the free ran is a use after free.
		require.Error(t, f.Fill(s, mem, n/4, 5, 0), "queued on freed pool memory")

		// The pool hands the addresses out again, as a new buffer.
		again, r := p.Alloc(n, s)
		require.Equal(t, cuOK, r)
		require.Equal(t, mem, again, "the pool reuses a freed block of the same size")
		newID, r := p.Attr(again, attrBufferID)
		require.Equal(t, cuOK, r)
		require.NotEqual(t, oldID, newID, "a new allocation at the same address is a new buffer")
		require.Equal(t, cuOK, p.Free(again, s))
		f.Drain(s)
		return nil
	}))
}
