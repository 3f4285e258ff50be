package staged_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/cuda/staged"
	"github.com/gonccl/gonccl/internal/reduce"
)

// hotRank is one rank of TestStagedGPUReductionAllocatesOnlyOnce: its communicator,
// stream, kernels, buffers and pool, kept across operations as a process group's are.
type hotRank struct {
	c          *core.Comm
	s          uintptr
	ctx        driver.Context
	k          *kernels.Kernels
	send, recv uintptr
	pool       *staged.Pool
}

// allReduce runs one staged all_reduce with the reduction on the GPU (as capi issues
// it) and waits for it.
func (h *hotRank) allReduce(t *testing.T, f *cudatest.Fake, rank, nranks, count, per int) error {
	st, err := h.pool.StageReduceGPU(h.ctx, driver.Stream(h.s), h.k, staged.GPUAllReduce, h.send, h.recv, count, reduce.Float32, reduce.Sum, per, 0, rank, nranks, 0)
	if err != nil {
		return err
	}
	var reqs []*core.Request
	for i := 0; i < st.Chunks(); i++ {
		for j, step := range []staged.Step{st.ReduceStep(i), st.GatherStep(i)} {
			hk := core.Hooks{Before: func(dl time.Time) error { return st.BeforeChunk(i, dl) },
				After: func(err error) error { return st.AfterReduce(i, err) }}
			if j == 1 {
				hk = core.Hooks{Before: func(dl time.Time) error { return st.BeforeGather(i, dl) },
					After: func(err error) error { return st.AfterGather(i, err) }}
			}
			req, err := h.c.AlltoAllv(step.Send, step.SendCounts, step.SendDispls, step.Recv, step.RecvCounts, step.RecvDispls, reduce.Float32, core.WithHooks(hk))
			if err != nil {
				return err
			}
			reqs = append(reqs, req)
		}
	}
	if err := st.SetIssued(len(reqs)); err != nil {
		return err
	}
	for _, r := range reqs {
		if _, err := r.Wait(-1); err != nil {
			return err
		}
	}
	f.Drain(h.s)
	return nil
}

// TestStagedGPUReductionAllocatesOnlyOnce: on a GPU cuMemAlloc, cuMemFree,
// cuMemHostAlloc and cuMemFreeHost wait for all work of the context (the fake's
// drain.c does too), so after its first operation a staged all_reduce with the
// reduction on the GPU allocates and frees nothing: its device scratch and pinned
// memory come back from the pool. Before, each operation allocated its device scratch
// and the next one freed it (1 cuMemAlloc and 1 cuMemFree per rank and operation).
func TestStagedGPUReductionAllocatesOnlyOnce(t *testing.T) {
	d, f := cudatest.Load(t)
	const nranks, count, per, ops = 2, 4096, 1024, 3
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	ranks := make([]*hotRank, nranks)
	errs := make([]error, nranks)
	phase := func(run func(r int, h *hotRank) error) {
		var wg sync.WaitGroup
		for r := range ranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = run(r, ranks[r])
			}()
		}
		wg.Wait()
		for r, err := range errs {
			require.NoError(t, err, "rank %d", r)
		}
	}
	phase(func(r int, _ *hotRank) (err error) {
		h := &hotRank{pool: staged.NewPool(d)}
		ranks[r] = h
		if h.c, err = core.NewComm(id, nranks, r, core.Options{Timeout: 30 * time.Second}); err != nil {
			return err
		}
		h.s = f.Stream(r)
		if h.ctx, err = d.StreamContext(driver.Stream(h.s)); err != nil {
			return err
		}
		if h.k, err = kernels.Load(d, h.ctx); err != nil {
			return err
		}
		h.send, h.recv = f.Malloc(r, 4*count), f.Malloc(r, 4*count)
		in := make([]float32, count)
		for i := range in {
			in[i] = float32(r + 1)
		}
		f.SetFloats(h.send, in)
		return h.allReduce(t, f, r, nranks, count, per) // warm-up: the pool grows
	})
	t.Cleanup(func() {
		for _, h := range ranks {
			if h != nil {
				require.NoError(t, h.pool.Close(10*time.Second))
				h.c.Destroy()
			}
		}
	})
	before, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	hostBefore := f.Counters()
	for range ops {
		phase(func(r int, h *hotRank) error { return h.allReduce(t, f, r, nranks, count, per) })
	}
	after, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	hostAfter := f.Counters()
	delta := after.Sub(before)
	require.Zero(t, delta.DevAllocs, "cuMemAlloc calls in %d operations after the first", ops)
	require.Zero(t, delta.DevFrees, "cuMemFree calls in %d operations after the first", ops)
	require.Zero(t, hostAfter.HostAllocs-hostBefore.HostAllocs, "cuMemHostAlloc calls in %d operations after the first", ops)
	require.Zero(t, hostAfter.HostFrees-hostBefore.HostFrees, "cuMemFreeHost calls in %d operations after the first", ops)
	require.Zero(t, delta.Drains, "calls that waited for the whole context")
	require.Zero(t, delta.LazyLoads, "kernels loaded lazily at their first launch")
	for r, h := range ranks {
		for i, v := range f.Floats(h.recv, count) {
			require.Equal(t, float32(3), v, "rank %d, element %d", r, i)
		}
	}
}

// TestKernelsLoadedAtInit: under lazy loading (the driver's default) a kernel is
// loaded at its first launch, which may wait for the context's other work, a stream
// waiting on a peer's flag included (the fake drains the context there, as for a free).
// LoadKernels loads every kernel up front (cuFuncLoad), so no launch loads one.
func TestKernelsLoadedAtInit(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.Stream(4) // a device no other test loads the kernels on
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	before, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	k, err := kernels.Load(d, ctx)
	require.NoError(t, err)
	const n = 256
	a, b := f.Malloc(4, 4*n), f.Malloc(4, 4*n)
	f.SetFloats(a, make([]float32, n))
	f.SetFloats(b, make([]float32, n))
	runtime.LockOSThread() // ReduceInto runs with the kernels' context current
	defer runtime.UnlockOSThread()
	f.SetCurrent(uintptr(ctx))
	defer f.SetCurrent(0)
	for _, dt := range []reduce.DataType{reduce.Float32, reduce.Float16, reduce.Bfloat16, reduce.Int32} {
		for _, op := range []reduce.RedOp{reduce.Sum, reduce.Prod, reduce.Max, reduce.Min} {
			require.NoError(t, k.ReduceInto(driver.Stream(s), a, b, n/dt.Size(), dt, op))
		}
	}
	f.Drain(s)
	after, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	require.Zero(t, after.Sub(before).LazyLoads, "kernels loaded lazily at their first launch")
}
