package staged_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/staged"
)

// chunkedGather runs a host "operation" pipelined by chunk that stands in for an
// all_gather of 3 blocks: block r of recvbuff is sendbuff + r. With inPlace, sendbuff
// is block 1 of recvbuff (as an in-place all_gather's is). It returns how many
// elements of the device result are wrong, and checks at every chunk that the copies
// of the later chunks of its window were queued before its host operation and those of
// earlier chunks queued back after theirs (the pipeline's structure, not its timing),
// and that the pinned memory stays within limit (0: none).
func chunkedGather(t *testing.T, count, per, limit int, inPlace bool) int {
	t.Helper()
	d, f := cudatest.Load(t)
	f.SetDelay(0, 50)
	defer f.SetDelay(0, 200)
	const blocks = 3
	s := f.Stream(2)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	recv := f.Malloc(2, 4*blocks*count)
	send := f.Malloc(2, 4*count)
	if inPlace {
		send = recv + uintptr(4*count)
	}
	in := make([]float32, count)
	for i := range in {
		in[i] = float32(10 * i)
	}
	f.SetFloats(send, in)
	pool := staged.NewPool(d)
	st, err := pool.StageChunked(ctx, driver.Stream(s), []staged.Piece{
		{Name: "sendbuff", Ptr: send, Blocks: 1, In: true},
		{Name: "recvbuff", Ptr: recv, Blocks: blocks, Out: true},
	}, count, 4, per, limit)
	require.NoError(t, err)
	n, w := st.Chunks(), st.Window()
	require.Equal(t, staged.ChunkCount(count, per), n)
	if limit > 0 {
		require.LessOrEqual(t, pool.Stats().Bytes, max(limit, 64<<10), "the pinned memory held (a window of %d of %d chunks)", w, n)
		require.Less(t, w, n)
	} else {
		require.Equal(t, n, w)
	}
	require.NoError(t, st.SetIssued(n))
	start := f.Counters()
	deadline := time.Now().Add(10 * time.Second)
	for k := 0; k < n; k++ {
		require.NoError(t, st.BeforeChunk(k, deadline))
		require.NotEqual(t, s, uintptr(st.BackStream()), "the copies back go on a stream of their own")
		f.Drain(s) // whatever was queued before chunk k's host operation has run
		f.Drain(uintptr(st.BackStream()))
		c := f.Counters()
		require.Equal(t, min(n, k+w), c.DtoH-start.DtoH, "chunk %d: the copies to the host of its window (%d chunks) are queued before its host operation", k, w)
		require.Equal(t, blocks*k, c.HtoD-start.HtoD, "chunk %d: the chunks before it are copied back before its host operation", k)
		h := st.ChunkHost(k)
		src, dst := floats(h[0]), floats(h[1])
		m := len(src)
		require.Equal(t, blocks*m, len(dst))
		for r := 0; r < blocks; r++ {
			for i := range src {
				dst[r*m+i] = src[i] + float32(r)
			}
		}
		require.NoError(t, st.AfterChunk(k, nil))
	}
	f.Drain(s) // it waits for the copies back
	got := f.Floats(recv, blocks*count)
	wrong := 0
	for r := 0; r < blocks; r++ {
		for i := 0; i < count; i++ {
			if got[r*count+i] != in[i]+float32(r) {
				wrong++
			}
		}
	}
	c := f.Counters()
	require.Zero(t, c.BadAccess-start.BadAccess)
	require.Zero(t, c.HostRaces-start.HostRaces)
	require.NoError(t, pool.Close(10*time.Second))
	return wrong
}

// TestChunkedStagingPipelines: sizes that are and are not a multiple of the chunk, one
// chunk and many, out of place and in place, all give the reference result with the
// pipeline's structure.
func TestChunkedStagingPipelines(t *testing.T) {
	for _, tc := range []struct{ count, per int }{{1000, 128}, {1024, 256}, {7, 1}, {300, 300}, {5, 2}} {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("count%d_per%d_inplace%v", tc.count, tc.per, inPlace), func(t *testing.T) {
				require.Zero(t, chunkedGather(t, tc.count, tc.per, 0, inPlace))
			})
		}
	}
}

// TestChunkedStagingPinnedBounded: an operation 8 times the pinned limit (1 MiB of
// buffers, 128 KiB) holds no more pinned memory than the limit (a ring of as many chunks
// as fit: the copies to the host of a chunk wait for the copies back of the chunk before
// it in its slot), with the pipeline's structure, no copy racing the host's use of a
// slot, and the reference result: sizes that are and are not a multiple of the chunk, out
// of place and in place, and a limit below two chunks (two are held: 64 KiB, the pool's
// smallest block).
func TestChunkedStagingPinnedBounded(t *testing.T) {
	for _, tc := range []struct{ count, per, limit int }{
		{65536, 1024, 128 << 10}, // 64 chunks of 16 KiB, a window of 8
		{65000, 1000, 128 << 10}, // the last chunk shorter
		{16001, 2000, 1},         // a window of 2
	} {
		for _, inPlace := range []bool{false, true} {
			t.Run(fmt.Sprintf("count%d_per%d_limit%d_inplace%v", tc.count, tc.per, tc.limit, inPlace), func(t *testing.T) {
				require.Zero(t, chunkedGather(t, tc.count, tc.per, tc.limit, inPlace))
			})
		}
	}
}

// TestChunkedStagingSlotWaitsForCopyBack: with slow copies (1 MiB/s: each chunk's copy
// back is still running when the next copies are queued) and a window of 2, the chunk
// that reuses a slot is copied in only after the slot's copy back has run (else chunk
// 0's result would be chunk 2's input), and the fake sees no copy racing another on the
// slot's memory.
func TestChunkedStagingSlotWaitsForCopyBack(t *testing.T) {
	d, f := cudatest.Load(t)
	f.SetCopyRate(1)
	defer f.SetCopyRate(0)
	s := f.Stream(2)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	const count, per = 4096, 512
	buf := f.Malloc(2, 4*count)
	in := make([]float32, count)
	for i := range in {
		in[i] = float32(i)
	}
	f.SetFloats(buf, in)
	pool := staged.NewPool(d)
	st, err := pool.StageChunked(ctx, driver.Stream(s), []staged.Piece{{Name: "buf", Ptr: buf, Blocks: 1, In: true, Out: true}}, count, 4, per, 1)
	require.NoError(t, err)
	require.Equal(t, 2, st.Window())
	require.NoError(t, st.SetIssued(st.Chunks()))
	start := f.Counters()
	deadline := time.Now().Add(10 * time.Second)
	for k := 0; k < st.Chunks(); k++ {
		require.NoError(t, st.BeforeChunk(k, deadline))
		for i, h := 0, floats(st.ChunkHost(k)[0]); i < len(h); i++ {
			h[i] *= 2
		}
		require.NoError(t, st.AfterChunk(k, nil))
	}
	f.Drain(s)
	for i, v := range f.Floats(buf, count) {
		require.Equal(t, 2*in[i], v, "element %d", i)
	}
	c := f.Counters()
	require.Zero(t, c.HostRaces-start.HostRaces)
	require.Zero(t, c.BadAccess-start.BadAccess)
	require.NoError(t, pool.Close(10*time.Second))
}

// TestChunkedStagingWrongOffsetFails: a chunk copied from and to the wrong offset
// (one element early) gives wrong values, which the check above catches.
func TestChunkedStagingWrongOffsetFails(t *testing.T) {
	cuda.SetTestFault("chunk-offset")
	defer cuda.SetTestFault("")
	require.NotZero(t, chunkedGather(t, 1000, 128, 0, false))
	require.NotZero(t, chunkedGather(t, 65536, 1024, 128<<10, false))
}

// TestChunkedStagingStopsAfterAFailure: once a chunk's host operation fails, nothing
// more is copied back, and the staging still finishes (its blocks are reclaimed).
func TestChunkedStagingStopsAfterAFailure(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.Stream(2)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	const count = 100
	buf := f.Malloc(2, 4*count)
	f.SetFloats(buf, make([]float32, count))
	pool := staged.NewPool(d)
	st, err := pool.StageChunked(ctx, driver.Stream(s), []staged.Piece{{Name: "buf", Ptr: buf, Blocks: 1, In: true, Out: true}}, count, 4, 30, 0)
	require.NoError(t, err)
	require.Equal(t, 4, st.Chunks())
	start := f.Counters()
	deadline := time.Now().Add(10 * time.Second)
	boom := fmt.Errorf("boom")
	for k := 0; k < 4; k++ {
		require.NoError(t, st.BeforeChunk(k, deadline))
		for i, h := 0, floats(st.ChunkHost(k)[0]); i < len(h); i++ {
			h[i] = 1
		}
		var opErr error
		if k >= 1 {
			opErr = boom
		}
		require.NoError(t, st.AfterChunk(k, opErr))
	}
	require.NoError(t, st.SetIssued(4))
	require.ErrorIs(t, st.ChunkErr(), boom)
	f.Drain(s)
	require.Equal(t, 1, f.Counters().HtoD-start.HtoD, "only the chunk before the failure is copied back")
	got := f.Floats(buf, count)
	require.Equal(t, float32(1), got[29])
	require.Equal(t, float32(0), got[30])
	require.NoError(t, pool.Close(10*time.Second))
	require.Equal(t, 1, pool.Stats().Allocs)
}

// TestChunkedStagingCopiesBackBesideCopiesIn: a chunk's copy back runs while the copies
// to the host of later chunks have not: with the staging's stream held once chunk 0's
// copy to the host has run (capture: nothing queued on it starts), chunk 0's copy back
// still completes. On one stream it would wait behind them (Drain would never return).
func TestChunkedStagingCopiesBackBesideCopiesIn(t *testing.T) {
	d, f := cudatest.Load(t)
	skipAtOneQueue(t, f, "a chunk's copy back run beside the copies in on another stream")
	f.SetDelay(2000, 2000) // each copy to the host takes 2 ms: the hold comes before most
	defer f.SetDelay(0, 200)
	s := f.Stream(2)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	const count, per = 100, 4
	buf := f.Malloc(2, 4*count)
	f.SetFloats(buf, make([]float32, count))
	pool := staged.NewPool(d)
	st, err := pool.StageChunked(ctx, driver.Stream(s), []staged.Piece{{Name: "buf", Ptr: buf, Blocks: 1, In: true, Out: true}}, count, 4, per, 0)
	require.NoError(t, err)
	require.Equal(t, 25, st.Chunks())
	require.NoError(t, st.SetIssued(st.Chunks()))
	deadline := time.Now().Add(10 * time.Second)
	start := f.Counters()
	require.NoError(t, st.BeforeChunk(0, deadline))
	require.NoError(t, f.Capture(s, true))
	for i, h := 0, floats(st.ChunkHost(0)[0]); i < len(h); i++ {
		h[i] = 5
	}
	require.NoError(t, st.AfterChunk(0, nil))
	f.Drain(uintptr(st.BackStream()))
	c := f.Counters()
	require.Equal(t, 1, c.HtoD-start.HtoD, "chunk 0 is back on the device")
	require.Less(t, c.DtoH-start.DtoH, st.Chunks(), "while later chunks' copies to the host wait on the held stream")
	require.Equal(t, float32(5), f.Floats(buf, count)[0])
	require.NoError(t, f.Capture(s, false))
	for k := 1; k < st.Chunks(); k++ {
		require.NoError(t, st.BeforeChunk(k, deadline))
		require.NoError(t, st.AfterChunk(k, nil))
	}
	f.Drain(s)
	require.NoError(t, pool.Close(10*time.Second))
}

// TestChunkedStagingCopiesBackAfterEarlierWork: a rank with nothing to copy in (a
// broadcast's receiver) never waits on the host for the work queued before the
// operation; its copies back, on another stream, must still land after that work (a slow
// kernel writing the same buffer), not be overwritten by it.
func TestChunkedStagingCopiesBackAfterEarlierWork(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.Stream(2)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	const count = 1000
	buf := f.Malloc(2, 4*count)
	require.NoError(t, f.Fill(s, buf, count, -1, 30000)) // 30 ms, queued before the operation
	pool := staged.NewPool(d)
	st, err := pool.StageChunked(ctx, driver.Stream(s), []staged.Piece{{Name: "recvbuff", Ptr: buf, Blocks: 1, Out: true}}, count, 4, 128, 0)
	require.NoError(t, err)
	require.NoError(t, st.SetIssued(st.Chunks()))
	deadline := time.Now().Add(10 * time.Second)
	for k := 0; k < st.Chunks(); k++ {
		require.NoError(t, st.BeforeChunk(k, deadline))
		for i, h := 0, floats(st.ChunkHost(k)[0]); i < len(h); i++ {
			h[i] = 7
		}
		require.NoError(t, st.AfterChunk(k, nil))
	}
	f.Drain(s)
	for i, v := range f.Floats(buf, count) {
		require.Equal(t, float32(7), v, "element %d: the kernel queued before the operation overwrote its result", i)
	}
	require.NoError(t, pool.Close(10*time.Second))
}

// TestChunkedStagingTimesOut: a chunk whose copy to the host never runs (the stream is
// stuck) fails its host operation at the deadline, naming the chunk, and the staging
// still finishes. The pool is warmed first, as a communicator's is after its first
// operations: allocating pinned memory would wait for the stuck stream.
func TestChunkedStagingTimesOut(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.Stream(2)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	const count = 100
	buf := f.Malloc(2, 4*count)
	pool := staged.NewPool(d)
	warm, err := pool.StageChunked(ctx, driver.Stream(s), []staged.Piece{{Name: "buf", Ptr: buf, Blocks: 1, In: true, Out: true}}, count, 4, 30, 0)
	require.NoError(t, err)
	require.NoError(t, warm.SetIssued(warm.Chunks()))
	for k := 0; k < warm.Chunks(); k++ {
		require.NoError(t, warm.BeforeChunk(k, time.Now().Add(10*time.Second)))
		require.NoError(t, warm.AfterChunk(k, nil))
	}
	f.Drain(s)
	require.NoError(t, f.Fill(s, buf, count, 1, 300000)) // 300 ms of earlier work: stuck for the deadline
	st, err := pool.StageChunked(ctx, driver.Stream(s), []staged.Piece{{Name: "buf", Ptr: buf, Blocks: 1, In: true, Out: true}}, count, 4, 30, 0)
	require.NoError(t, err)
	require.NoError(t, st.SetIssued(st.Chunks()))
	err = st.BeforeChunk(0, time.Now().Add(20*time.Millisecond))
	require.ErrorContains(t, err, "the copy to the host of chunk 0 of 4")
	require.ErrorContains(t, err, "did not finish in time")
	for k := 0; k < st.Chunks(); k++ {
		require.NoError(t, st.AfterChunk(k, err))
	}
	f.Drain(s)
	require.Equal(t, float32(1), f.Floats(buf, count)[0], "nothing was copied back")
	require.NoError(t, pool.Close(10*time.Second))
}
