package staged_test

import (
	"errors"
	"os"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/staged"
)

// TestMain removes the fake driver cudatest.Load built.
func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

// TestStagingRoundTrip runs the whole contract on a stream whose operations are
// delayed: a slow kernel queued before Before is seen by the host buffers, the host
// result reaches the device after After, and a kernel queued after After sees it.
func TestStagingRoundTrip(t *testing.T) {
	d, f := cudatest.Load(t)
	f.SetDelay(0, 300)
	const n = 1000
	s := f.Stream(0)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	in, out := f.Malloc(0, 4*n), f.Malloc(0, 4*n)
	require.NoError(t, f.Fill(s, in, n, 3, 20000)) // 20 ms: Before must wait for it
	before := f.Counters()

	pool := staged.NewPool(d)
	st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{
		{Name: "sendbuff", Ptr: in, Bytes: 4 * n, In: true},
		{Name: "recvbuff", Ptr: out, Bytes: 4 * n, Out: true},
	})
	require.NoError(t, err)
	require.NoError(t, st.Before(time.Now().Add(10*time.Second)))
	host := floats(st.Host[0])
	for i := range host {
		require.Equal(t, float32(3), host[i], "element %d: the staged input missed the kernel queued before it", i)
	}
	res := floats(st.Host[1])
	for i := range res {
		res[i] = 2 * host[i]
	}
	require.NoError(t, st.After(nil))
	require.NoError(t, f.Add(s, out, n, 1, 0)) // later work sees the result
	f.Drain(s)
	for i, v := range f.Floats(out, n) {
		require.Equal(t, float32(7), v, "element %d", i)
	}
	c := f.Counters()
	require.Equal(t, 1, c.DtoH-before.DtoH)
	require.Equal(t, 1, c.HtoD-before.HtoD)
	require.Zero(t, c.BadAccess)
	require.Zero(t, c.HostRaces)
	require.Zero(t, c.ContextErrors, "a CUDA call ran without the stream's context current")
	require.NoError(t, pool.Close(10*time.Second))
	require.Equal(t, before.HostLive, f.Counters().HostLive, "Close must free every pinned block")
}

// TestWaitOnOrdersAnotherStream: a second stream that waits on the staging's event
// sees the result, even though the H2D copy is slow.
func TestWaitOnOrdersAnotherStream(t *testing.T) {
	d, f := cudatest.Load(t)
	f.SetDelay(0, 100)
	const n = 256
	s, waiter := f.Stream(1), f.Stream(1)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	buf := f.Malloc(1, 4*n)
	f.SetFloats(buf, make([]float32, n))
	pool := staged.NewPool(d)
	defer pool.Close(10 * time.Second)
	st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "buf", Ptr: buf, Bytes: 4 * n, In: true, Out: true}})
	require.NoError(t, err)
	require.NoError(t, st.Before(time.Now().Add(10*time.Second)))
	require.NoError(t, f.Fill(s, buf, 1, 0, 20000)) // delays the H2D copy queued next
	res := floats(st.Host[0])
	for i := range res {
		res[i] = 5
	}
	require.NoError(t, st.After(nil))
	require.NoError(t, st.WaitOn(driver.Stream(waiter)))
	require.NoError(t, f.Add(waiter, buf, n, 1, 0))
	f.Drain(waiter)
	f.Drain(s)
	require.Equal(t, float32(6), f.Floats(buf, n)[n-1])
}

func TestPoolReusesOnlyAfterTheEvent(t *testing.T) {
	d, f := cudatest.Load(t)
	f.SetDelay(0, 50)
	s := f.Stream(0)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	buf := f.Malloc(0, 4096)
	pool := staged.NewPool(d)
	regions := []staged.Region{{Name: "buf", Ptr: buf, Bytes: 4096, In: true, Out: true}}
	run := func() *staged.Staging {
		st, err := pool.Stage(ctx, driver.Stream(s), regions)
		require.NoError(t, err)
		require.NoError(t, st.Before(time.Now().Add(10*time.Second)))
		require.NoError(t, st.After(nil))
		return st
	}
	run()
	f.Drain(s)
	run() // the first staging's event has completed: its block is reused
	st := pool.Stats()
	require.Equal(t, 1, st.Allocs)
	require.Equal(t, 1, st.Reuses)

	// Hold the stream with a slow kernel: the next staging's H2D is still queued, so
	// the one after it must get a block of its own.
	f.Drain(s)
	require.NoError(t, f.Fill(s, buf, 1, 0, 0))
	first, err := pool.Stage(ctx, driver.Stream(s), regions)
	require.NoError(t, err)
	require.NoError(t, first.Before(time.Now().Add(10*time.Second)))
	require.NoError(t, f.Fill(s, buf, 1, 0, 30000))
	require.NoError(t, first.After(nil))
	second, err := pool.Stage(ctx, driver.Stream(s), regions)
	require.NoError(t, err)
	require.NotEqual(t, &first.Host[0][0], &second.Host[0][0], "a block was reused before its H2D copy ran")
	second.Cancel()
	require.Equal(t, 2, pool.Stats().Allocs)
	require.NoError(t, pool.Close(10*time.Second))
	require.Zero(t, f.Counters().BadAccess)
}

func TestInPlaceRegionsShareHostMemory(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.Stream(0)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	buf := f.Malloc(0, 4*40)
	pool := staged.NewPool(d)
	defer pool.Close(10 * time.Second)
	// all_gather in place: the send block is recv's block 2 (of 4).
	st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{
		{Name: "sendbuff", Ptr: buf + 4*20, Bytes: 4 * 10, In: true},
		{Name: "recvbuff", Ptr: buf, Bytes: 4 * 40, Out: true},
		{Name: "unused"},
	})
	require.NoError(t, err)
	require.Equal(t, &st.Host[1][80], &st.Host[0][0])
	require.Len(t, st.Host[2], 0)
	st.Cancel()
}

func TestCopyErrorNamesTheCUDAError(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.Stream(0)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	before := f.Counters()
	good, buf := f.Malloc(0, 64), f.Malloc(0, 64)
	require.NoError(t, f.Free(buf))
	f.SetDelay(5000, 5000) // the good copy is still queued when the bad one fails
	defer f.SetDelay(0, 200)
	pool := staged.NewPool(d)
	defer pool.Close(10 * time.Second)
	regions := []staged.Region{{Name: "good", Ptr: good, Bytes: 64, In: true}, {Name: "sendbuff", Ptr: buf, Bytes: 64, In: true}}
	st, err := pool.Stage(ctx, driver.Stream(s), regions)
	require.NoError(t, err)
	err = st.Before(time.Now().Add(10 * time.Second))
	var ce *driver.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, "CUDA_ERROR_INVALID_VALUE", ce.Name)
	require.Contains(t, err.Error(), "cuda: cuMemcpyDtoHAsync (sendbuff")
	require.Equal(t, 1, f.Counters().DtoH-before.DtoH, "Before returned before the copy it had enqueued ran")
	require.NoError(t, st.After(err))
	f.Drain(s)
	st2, err := pool.Stage(ctx, driver.Stream(s), regions[:1])
	require.NoError(t, err)
	st2.Cancel()
	require.Equal(t, 1, pool.Stats().Reuses, "the failed staging's block must be reused once its copy ran")
}

// floats views pinned host memory as float32s.
func floats(b []byte) []float32 {
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// skipAtOneQueue skips a test of what streams on separate hardware queues do (copies
// overlapping, one stream running while another is held) when this process runs the
// package at one queue, where the fake, like the driver, serializes them.
func skipAtOneQueue(t *testing.T, f *cudatest.Fake, what string) {
	t.Helper()
	if f.HardwareQueues() == 1 {
		t.Skipf("at one hardware queue per context (CUDA_DEVICE_MAX_CONNECTIONS=1) %s cannot happen", what)
	}
}

// TestStagingPoolMemory: the staged path takes stream-ordered pool memory (cudaMallocAsync,
// PyTorch's backend:cudaMallocAsync) as it takes cudaMalloc memory, and its copies are
// queued on the caller's stream before After returns: a cuMemFreeAsync the caller
// queues next on that stream (as that allocator frees a tensor once its stream is done
// with it) runs after them, so no copy touches freed memory.
func TestStagingPoolMemory(t *testing.T) {
	d, f := cudatest.Load(t)
	p, err := cudatest.OpenPool(cudatest.Path(t))
	require.NoError(t, err)
	f.SetDelay(0, 300)
	const n = 1000
	s := f.Stream(0)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	var in, out uintptr
	require.NoError(t, d.Do(ctx, func() error {
		var r1, r2 int
		in, r1 = p.Alloc(4*n, s)
		out, r2 = p.Alloc(4*n, s)
		require.Zero(t, r1)
		require.Zero(t, r2)
		return nil
	}))
	require.NoError(t, f.Fill(s, in, n, 3, 20000))
	before := f.Counters()

	pool := staged.NewPool(d)
	st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{
		{Name: "sendbuff", Ptr: in, Bytes: 4 * n, In: true},
		{Name: "recvbuff", Ptr: out, Bytes: 4 * n, Out: true},
	})
	require.NoError(t, err)
	require.NoError(t, st.Before(time.Now().Add(10*time.Second)))
	host := floats(st.Host[0])
	res := floats(st.Host[1])
	for i := range res {
		res[i] = 2 * host[i]
	}
	require.NoError(t, st.After(nil))
	require.NoError(t, f.Check(s, out, n, 6, 0))
	require.NoError(t, d.Do(ctx, func() error {
		require.Zero(t, p.Free(in, s))
		require.Zero(t, p.Free(out, s))
		return nil
	}))
	f.Drain(s)
	c := f.Counters()
	require.Equal(t, 1, c.HtoD-before.HtoD)
	require.Zero(t, c.BadAccess-before.BadAccess, "a staging copy ran after the stream-ordered free")
	require.Zero(t, c.StaleReads-before.StaleReads, "the result was not on the device when the stream went on")
	require.NoError(t, pool.Close(10*time.Second))
}
