package cuda_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/staged"
)

// Device-path operations in the communicator's flight recorder, against the fake
// driver, 2 ranks as goroutines on device 0. Each operation is recorded as capi's
// runDevice does it: IssueDeviceOp, the work on the stream between BeginDevice and
// EndDevice, then OnGPU with the staging's completion event as the poll.

// devTraceRank is one rank of TestDevicePathOpsInTheFlightRecorder.
type devTraceRank struct {
	c       *core.Comm
	sh      *cuda.Shared
	k       cuda.Reducer
	pool    *staged.Pool
	ctx     driver.Context
	dev     int
	s       uintptr
	buf     uintptr
	n       int
	dumpDir string
}

// allReduce issues one device-path all_reduce (sum, in place) and returns once its
// work is on the stream.
func (r *devTraceRank) allReduce() error {
	dop, err := r.c.IssueDeviceOp(core.KindAllReduce, core.Float32, core.Sum, -1, r.n)
	if err != nil {
		return err
	}
	st, err := r.pool.NewDevice(r.ctx, driver.Stream(r.s))
	if err != nil {
		return err
	}
	if err := st.BeginDevice(time.Now().Add(10 * time.Second)); err != nil {
		st.Cancel()
		dop.Failed(err)
		return err
	}
	err = r.sh.AllReduce(driver.Stream(r.s), r.k, r.buf, r.buf, r.n, core.Float32, core.Sum)
	if eerr := st.EndDevice(); err == nil {
		err = eerr
	}
	if err != nil {
		dop.Failed(err)
		return err
	}
	dop.OnGPU(st.Done)
	return nil
}

// dumped reads back the rank's flight recorder as DumpTrace writes it.
func (r *devTraceRank) dumped(name string) ([]map[string]any, error) {
	path := filepath.Join(r.dumpDir, fmt.Sprintf("%s_rank%d.json", name, r.c.Rank()))
	if err := r.c.DumpTrace(path); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tf struct {
		Ops []map[string]any `json:"ops"`
	}
	return tf.Ops, json.Unmarshal(b, &tf)
}

func TestDevicePathOpsInTheFlightRecorder(t *testing.T) {
	d, f := open(t)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	const nranks, n = 2, 1000
	ranks := make([]*devTraceRank, nranks)
	dir := t.TempDir()
	// Both ranks run each phase, then the test looks at both.
	phase := func(name string, do func(rank int, r *devTraceRank) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, nranks)
		for i := range nranks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = do(i, ranks[i])
			}()
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "%s: rank %d", name, i)
		}
	}
	devs := oneContextSafe(f, []int{0, 0})
	for i := range ranks {
		ranks[i] = &devTraceRank{n: n, dumpDir: dir, pool: staged.NewPool(d), dev: devs[i], s: f.Stream(devs[i])}
	}
	phase("setup", func(rank int, r *devTraceRank) error {
		c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		r.c = c
		if r.ctx, err = d.StreamContext(driver.Stream(r.s)); err != nil {
			return err
		}
		exchange := func(rec []byte) ([]byte, error) { // host all_gathers
			all := make([]byte, len(rec)*nranks)
			req, err := c.AllGather(rec, all, len(rec), core.Uint8)
			if err == nil {
				_, err = req.Wait(-1)
			}
			return all, err
		}
		if r.sh, err = cuda.NewShared(d, r.ctx, rank, nranks, devScratch, exchange); err != nil {
			return err
		}
		if r.k, err = reducerFor(d, r.ctx); err != nil {
			return err
		}
		r.buf = f.Malloc(r.dev, n*4)
		f.SetFloats(r.buf, make([]float32, n))
		return nil
	})
	t.Cleanup(func() {
		for _, r := range ranks {
			f.Drain(r.s)
		}
		phase("teardown", func(_ int, r *devTraceRank) error {
			return errors.Join(r.sh.Close(10*time.Second), r.pool.Close(10*time.Second), r.c.Destroy())
		})
	})

	// The setup's host all_gathers come first.
	base := len(ranks[0].c.Trace())
	require.Positive(t, base)

	// Rank 0's stream is held back by 1.5 s of earlier work: its all_reduces, and rank
	// 1's, which wait for rank 0's flags, are on the GPU but not finished. That is what a
	// dump taken during a hang must show.
	require.NoError(t, f.Fill(ranks[0].s, ranks[0].buf, n, 1, 1_500_000))
	phase("held all_reduces", func(_ int, r *devTraceRank) error {
		for range 2 {
			if err := r.allReduce(); err != nil {
				return err
			}
		}
		return nil
	})
	for rank, r := range ranks {
		tr := r.c.Trace()
		require.Len(t, tr, base+2, "rank %d: %+v", rank, tr)
		for _, e := range tr[base:] {
			require.Equal(t, core.PathDevice, e.Path, "rank %d: %+v", rank, e)
			require.Equal(t, core.TraceStarted, e.State, "rank %d: the stream is held back, yet %+v", rank, e)
			require.True(t, e.Finished.IsZero(), "rank %d: %+v", rank, e)
		}
		ops, err := r.dumped("held")
		require.NoError(t, err)
		require.Len(t, ops, base+2)
		for _, o := range ops[base:] {
			require.Equal(t, "device", o["path"], "rank %d: %v", rank, o)
			require.Equal(t, "started", o["state"], "rank %d: %v", rank, o)
			require.Nil(t, o["finished"], "rank %d: %v", rank, o)
		}
	}

	// Released: one more device all_reduce, then a staged (host) one.
	phase("more", func(_ int, r *devTraceRank) error {
		if err := r.allReduce(); err != nil {
			return err
		}
		f.Drain(r.s)
		in, out := make([]byte, 16), make([]byte, 16)
		req, err := r.c.AllReduce(in, out, 4, core.Float32, core.Sum)
		if err == nil {
			_, err = req.Wait(-1)
		}
		return err
	})
	for rank, r := range ranks {
		tr := r.c.Trace()
		require.Len(t, tr, base+4, "rank %d: %+v", rank, tr)
		type op struct {
			kind  core.Kind
			path  string
			count uint64
		}
		var want []op
		for range base {
			want = append(want, op{core.KindAllGather, core.PathHost, 0})
		}
		want = append(want, op{core.KindAllReduce, core.PathDevice, n}, op{core.KindAllReduce, core.PathDevice, n},
			op{core.KindAllReduce, core.PathDevice, n}, op{core.KindAllReduce, core.PathHost, 4})
		for i, e := range tr {
			require.Equal(t, uint64(i+1), e.Seq, "rank %d: %+v", rank, e)
			require.Equal(t, want[i].kind, e.Kind, "rank %d: %+v", rank, e)
			require.Equal(t, want[i].path, e.Path, "rank %d: %+v", rank, e)
			require.Equal(t, core.TraceCompleted, e.State, "rank %d: the streams drained, yet %+v", rank, e)
			require.False(t, e.Finished.IsZero(), "rank %d: %+v", rank, e)
			if want[i].path == core.PathDevice {
				require.Equal(t, want[i].count, e.Count, "rank %d: %+v", rank, e)
				require.Equal(t, uint64(4*n), e.Bytes, "rank %d: %+v", rank, e)
				require.Equal(t, core.AlgoDirect, e.Algo, "rank %d: %+v", rank, e)
				require.Equal(t, core.Float32, e.DType, "rank %d: %+v", rank, e)
				require.Equal(t, -1, e.Root, "rank %d: %+v", rank, e)
				require.False(t, e.Started.IsZero(), "rank %d: %+v", rank, e)
			}
		}
		ops, err := r.dumped("drained")
		require.NoError(t, err)
		require.Len(t, ops, base+4)
		require.Equal(t, "host", ops[base+3]["path"])
		require.Equal(t, "device", ops[base+2]["path"])
		require.Equal(t, "completed", ops[base+2]["state"])
		require.Equal(t, "sum", ops[base+2]["redop"])
	}
	// Rank 0's buffer was filled with 1s, rank 1's holds 0s: three sums make 1, 2, 4
	// on both, if the all_reduces ran after the held-back fill, as issued.
	for _, r := range ranks {
		require.Equal(t, float32(4), f.Floats(r.buf, n)[n-1])
	}
}
