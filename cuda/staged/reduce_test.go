package staged_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/cuda/staged"
	"github.com/gonccl/gonccl/internal/reduce"
)

// gpuCase is one staged reduction on the GPU.
type gpuCase struct {
	kind               staged.GPUReduceKind
	nranks, count, per int
	op                 reduce.RedOp
	inPlace            bool
	limit              int // pinned bytes (0: no limit)
}

// input is element i of rank r's sendbuff.
func input(i, r int) float32 { return float32(i%97 + r) }

// want is the reduction of x(q) over the ranks q.
func (tc gpuCase) want(x func(q int) float32) float32 {
	var w float32
	for q := 0; q < tc.nranks; q++ {
		switch {
		case q == 0:
			w = x(q)
		case tc.op == reduce.Max:
			w = max(w, x(q))
		default:
			w += x(q)
		}
	}
	if tc.op == reduce.Avg {
		w /= float32(tc.nranks)
	}
	return w
}

// gpuReduceRank runs one rank of a staged reduction on the GPU, issued to core as capi
// issues it (per chunk a reduce step, and for all_reduce a gather step: all-to-alls with
// the staging's hooks), and returns how many elements of the result differ from the
// reference.
func gpuReduceRank(t *testing.T, id core.UniqueID, rank int, tc gpuCase) (int, error) {
	d, f := cudatest.Load(t)
	c, err := core.NewComm(id, tc.nranks, rank, core.Options{Timeout: 30 * time.Second})
	if err != nil {
		return 0, err
	}
	defer c.Destroy()
	dev := rank % 2
	s := f.Stream(dev)
	ctx, err := d.StreamContext(driver.Stream(s))
	if err != nil {
		return 0, err
	}
	k, err := kernels.Load(d, ctx)
	if err != nil {
		return 0, err
	}
	sendLen, recvLen := tc.count, tc.count
	if tc.kind == staged.GPUReduceScatter {
		sendLen = tc.nranks * tc.count
	}
	send := f.Malloc(dev, 4*sendLen)
	in := make([]float32, sendLen)
	for i := range in {
		in[i] = input(i, rank)
	}
	f.SetFloats(send, in)
	var recv uintptr
	switch {
	case tc.inPlace && tc.kind == staged.GPUReduceScatter:
		recv = send + uintptr(4*rank*tc.count)
	case tc.inPlace:
		recv = send
	default:
		recv = f.Malloc(dev, 4*recvLen)
		f.SetFloats(recv, make([]float32, recvLen))
	}
	const root = 1
	pool := staged.NewPool(d)
	defer pool.Close(10 * time.Second)
	st, err := pool.StageReduceGPU(ctx, driver.Stream(s), k, tc.kind, send, recv, tc.count, reduce.Float32, tc.op, tc.per, tc.limit, rank, tc.nranks, root)
	if err != nil {
		return 0, err
	}
	if tc.limit > 0 && pool.Stats().Bytes > tc.limit {
		return 0, fmt.Errorf("%d bytes of pinned memory held, limit %d (a window of %d of %d chunks)", pool.Stats().Bytes, tc.limit, st.Window(), st.Chunks())
	}
	var reqs []*core.Request
	for i := 0; i < st.Chunks(); i++ {
		steps := []staged.Step{st.ReduceStep(i)}
		if tc.kind == staged.GPUAllReduce {
			steps = append(steps, st.GatherStep(i))
		}
		for j, step := range steps {
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
	for i, v := range f.Floats(recv, recvLen) {
		var want float32
		switch {
		case tc.kind == staged.GPUReduceScatter:
			want = tc.want(func(q int) float32 { return input(rank*tc.count+i, q) })
		case tc.kind == staged.GPUReduce && rank != root:
			want = input(i, rank) // in place: the input, untouched; else the zeros
			if !tc.inPlace {
				want = 0
			}
		default:
			want = tc.want(func(q int) float32 { return input(i, q) })
		}
		if v != want {
			wrong++
		}
	}
	return wrong, nil
}

// gpuReduceRanks runs tc's ranks and returns the wrong elements of every rank.
func gpuReduceRanks(t *testing.T, tc gpuCase) []int {
	_, f := cudatest.Load(t)
	before := f.Counters()
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	var wg sync.WaitGroup
	wrong, errs := make([]int, tc.nranks), make([]error, tc.nranks)
	for r := 0; r < tc.nranks; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wrong[r], errs[r] = gpuReduceRank(t, id, r, tc)
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

// TestStagedReductionsOnGPU: all_reduce, reduce_scatter and reduce on 2-4 ranks, sizes
// that are not a multiple of the chunk (and a last chunk smaller than the ranks, whose
// shards are partly empty), in place and out of place, sum, max and avg: every rank
// holds the reference result.
func TestStagedReductionsOnGPU(t *testing.T) {
	for _, tc := range []gpuCase{
		{staged.GPUAllReduce, 2, 1000, 128, reduce.Sum, false, 0},
		{staged.GPUAllReduce, 3, 1000, 128, reduce.Sum, true, 0},
		{staged.GPUAllReduce, 4, 1001, 250, reduce.Max, false, 0},
		{staged.GPUAllReduce, 4, 4098, 1024, reduce.Avg, true, 0},
		{staged.GPUAllReduce, 3, 7, 3, reduce.Sum, false, 0},
		{staged.GPUReduceScatter, 2, 1000, 128, reduce.Sum, false, 0},
		{staged.GPUReduceScatter, 3, 301, 100, reduce.Avg, true, 0},
		{staged.GPUReduceScatter, 4, 5, 2, reduce.Max, false, 0},
		{staged.GPUReduce, 2, 1000, 128, reduce.Sum, true, 0},
		{staged.GPUReduce, 3, 1001, 250, reduce.Max, false, 0},
		{staged.GPUReduce, 4, 999, 100, reduce.Avg, false, 0},
	} {
		t.Run(fmt.Sprintf("%v_%dranks_count%d_per%d_%v_inplace%v", tc.kind, tc.nranks, tc.count, tc.per, tc.op, tc.inPlace), func(t *testing.T) {
			for r, w := range gpuReduceRanks(t, tc) {
				require.Zero(t, w, "rank %d: wrong elements", r)
			}
		})
	}
}

// TestStagedReductionsOnGPUPinnedBounded: the same reductions with the pinned memory
// limited to 128 KiB, an eighth of what the whole operation takes or less (on a
// reduce's root; its other ranks hold only their input): no more is held, on 2-4 ranks,
// with sizes that are not a multiple of the chunk, and every rank holds the reference
// result.
func TestStagedReductionsOnGPUPinnedBounded(t *testing.T) {
	const limit = 128 << 10
	for _, tc := range []gpuCase{
		{staged.GPUAllReduce, 2, 110001, 2500, reduce.Sum, false, limit}, // 1.1 MB: 45 chunks of 25 KB, a window of 5
		{staged.GPUAllReduce, 3, 100003, 2000, reduce.Sum, true, limit},
		{staged.GPUAllReduce, 4, 100000, 3000, reduce.Avg, false, limit},
		{staged.GPUReduceScatter, 3, 60001, 1500, reduce.Max, true, limit}, // 1.2 MB: 41 chunks of 30 KB
		{staged.GPUReduceScatter, 4, 50000, 1024, reduce.Sum, false, limit},
		{staged.GPUReduce, 2, 140001, 4000, reduce.Sum, true, limit}, // the root: 1.1 MB
		{staged.GPUReduce, 4, 70001, 2000, reduce.Max, false, limit},
	} {
		t.Run(fmt.Sprintf("%v_%dranks_count%d_per%d", tc.kind, tc.nranks, tc.count, tc.per), func(t *testing.T) {
			for r, w := range gpuReduceRanks(t, tc) {
				require.Zero(t, w, "rank %d: wrong elements", r)
			}
		})
	}
}

// TestStagedReductionOnGPUWrongOffsetFails: chunks copied from the wrong offset give
// wrong results, which the check catches.
func TestStagedReductionOnGPUWrongOffsetFails(t *testing.T) {
	cuda.SetTestFault("chunk-offset")
	defer cuda.SetTestFault("")
	for _, kind := range []staged.GPUReduceKind{staged.GPUAllReduce, staged.GPUReduceScatter, staged.GPUReduce} {
		total := 0
		for _, w := range gpuReduceRanks(t, gpuCase{kind, 2, 1000, 128, reduce.Sum, false, 0}) {
			total += w
		}
		require.NotZero(t, total, "kind %v", kind)
	}
}
