package cuda_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/internal/reduce"
)

// gpuAllReduceRank runs one rank of a staged all_reduce with the reduction on the GPU,
// issued to core as capi issues it (two all-to-alls per chunk, with the staging's
// hooks), and returns how many elements of the result differ from the reference.
func gpuAllReduceRank(t *testing.T, id core.UniqueID, rank, nranks, count, per int, op reduce.RedOp, inPlace bool) (int, error) {
	d, f := open(t)
	c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: 30 * time.Second})
	if err != nil {
		return 0, err
	}
	defer c.Destroy()
	dev := rank % 2
	s := f.Stream(dev)
	ctx, err := d.StreamContext(cuda.Stream(s))
	if err != nil {
		return 0, err
	}
	k, err := d.LoadKernels(ctx)
	if err != nil {
		return 0, err
	}
	send := f.Malloc(dev, 4*count)
	recv := send
	if !inPlace {
		recv = f.Malloc(dev, 4*count)
		f.SetFloats(recv, make([]float32, count))
	}
	in := make([]float32, count)
	for i := range in {
		in[i] = float32(i%97 + rank)
	}
	f.SetFloats(send, in)
	pool := cuda.NewPool(d)
	defer pool.Close(10 * time.Second)
	st, err := pool.StageAllReduceGPU(ctx, cuda.Stream(s), k, send, recv, count, reduce.Float32, op, per, rank, nranks)
	if err != nil {
		return 0, err
	}
	var reqs []*core.Request
	for i := 0; i < st.Chunks(); i++ {
		for j, step := range []cuda.Step{st.ReduceStep(i), st.GatherStep(i)} {
			h := core.Hooks{Before: func(dl time.Time) error { return st.BeforeChunk(i, dl) },
				After: func(err error) error { return st.AfterReduce(i, err) }}
			if j == 1 {
				h = core.Hooks{Before: func(dl time.Time) error { return st.BeforeGather(i, dl) },
					After: func(err error) error { return st.AfterGather(i, err) }}
			}
			req, err := c.AlltoAllv(step.Send, step.SendCounts, step.SendDispls, step.Recv, step.RecvCounts, step.RecvDispls, reduce.Float32, core.WithHooks(h))
			if err != nil {
				return 0, err
			}
			reqs = append(reqs, req)
		}
	}
	if err := st.SetIssued(len(reqs)); err != nil {
		return 0, err
	}
	for _, r := range reqs {
		if _, err := r.Wait(-1); err != nil {
			return 0, err
		}
	}
	f.Drain(s)
	wrong := 0
	for i, v := range f.Floats(recv, count) {
		var want float32
		for r := 0; r < nranks; r++ {
			x := float32(i%97 + r)
			switch {
			case r == 0:
				want = x
			case op == reduce.Max:
				want = max(want, x)
			default:
				want += x
			}
		}
		if op == reduce.Avg {
			want /= float32(nranks)
		}
		if v != want {
			wrong++
		}
	}
	return wrong, nil
}

// gpuAllReduce runs nranks ranks of gpuAllReduceRank and returns the wrong elements of
// every rank.
func gpuAllReduce(t *testing.T, nranks, count, per int, op reduce.RedOp, inPlace bool) []int {
	d, f := open(t)
	_ = d
	before := f.Counters()
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	var wg sync.WaitGroup
	wrong, errs := make([]int, nranks), make([]error, nranks)
	for r := 0; r < nranks; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrong[r], errs[r] = gpuAllReduceRank(t, id, r, nranks, count, per, op, inPlace)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	c := f.Counters()
	require.Zero(t, c.BadAccess-before.BadAccess)
	require.Zero(t, c.HostRaces-before.HostRaces)
	require.Zero(t, c.ContextErrors-before.ContextErrors)
	require.Greater(t, c.Kernels-before.Kernels, 0, "the reduction ran on the (fake) GPU")
	return wrong
}

// TestStagedAllReduceOnGPU: 2-4 ranks, sizes that are not a multiple of the chunk (and a
// last chunk smaller than the ranks, whose shards are partly empty), in place and out of
// place, sum, max and avg: every rank holds the reference result.
func TestStagedAllReduceOnGPU(t *testing.T) {
	for _, tc := range []struct {
		nranks, count, per int
		op                 reduce.RedOp
		inPlace            bool
	}{
		{2, 1000, 128, reduce.Sum, false},
		{3, 1000, 128, reduce.Sum, true},
		{4, 1001, 250, reduce.Max, false},
		{4, 4098, 1024, reduce.Avg, true},
		{3, 7, 3, reduce.Sum, false},
	} {
		t.Run(fmt.Sprintf("%dranks_count%d_per%d_%v_inplace%v", tc.nranks, tc.count, tc.per, tc.op, tc.inPlace), func(t *testing.T) {
			for r, w := range gpuAllReduce(t, tc.nranks, tc.count, tc.per, tc.op, tc.inPlace) {
				require.Zero(t, w, "rank %d: wrong elements", r)
			}
		})
	}
}

// TestStagedAllReduceOnGPUWrongOffsetFails: chunks copied from the wrong offset give
// wrong results, which the check catches.
func TestStagedAllReduceOnGPUWrongOffsetFails(t *testing.T) {
	cuda.SetTestFault("chunk-offset")
	defer cuda.SetTestFault("")
	total := 0
	for _, w := range gpuAllReduce(t, 2, 1000, 128, reduce.Sum, false) {
		total += w
	}
	require.NotZero(t, total)
}
