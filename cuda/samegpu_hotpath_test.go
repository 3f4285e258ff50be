package cuda_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/samegpu"
)

// TestSameGPUHotPathAllocatesNothing: once an operation of each size has run, the
// same-GPU path allocates, frees, exports and maps nothing more (a cuMemAlloc or
// cuMemFree waits for the whole context on a real GPU, and would on every operation).
// Three processes on one fake device, buffers of cuMemAlloc and buffers the driver does
// not export (both through each follower's exchange buffer, made once and mapped once
// by the launcher), all_reduce and all_gather; each rank reads its own process's strict
// counters.
func TestSameGPUHotPathAllocatesNothing(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "samegpu-hotpath")
	out, err := runDevRanks(t, "0,0,0", "", "0,50")
	require.NoError(t, err, "%s", out)
	require.Contains(t, out, "rank 0: hot path: 0 allocations", out)
}

// sameGPUHotPathRank is one rank of TestSameGPUHotPathAllocatesNothing.
func sameGPUHotPathRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	r, err := openRank(d, f, id, rank, devs, 60*time.Second)
	if err != nil {
		return err
	}
	defer r.c.Destroy()
	c, dev, s, ctx := r.c, r.dev, r.s, r.ctx
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	g, err := samegpu.NewSameGPU(d, ctx, rank, nranks, 30*time.Second, hostExchange(c))
	if err != nil {
		return err
	}
	const count = 4096
	var exported [2]uintptr // send, recv
	for i := range exported {
		if exported[i], err = d.MemAllocIn(ctx, 4*count*nranks); err != nil {
			return err
		}
	}
	defer func() { // after Close: the launcher maps them until then
		for _, p := range exported {
			d.MemFreeIn(ctx, p)
		}
	}()
	plain := [2]uintptr{f.Malloc(dev, 4*count*nranks), f.Malloc(dev, 4*count*nranks)}
	in := make([]float32, count)
	for i := range in {
		in[i] = float32(rank + 1)
	}
	// One operation: all_reduce (even i) or all_gather (odd), on exported buffers
	// (i%4 < 2) or not, rank 1 the other way round.
	op := func(i int) error {
		bufs := plain
		if (i%4 < 2) != (rank == 1) {
			bufs = exported
		}
		f.SetFloats(bufs[0], in)
		if i%2 == 0 {
			err = g.AllReduce(s, red, bufs[0], bufs[1], count, core.Float32, core.Sum)
		} else {
			err = g.AllGather(s, bufs[0], bufs[1], 4*count)
		}
		if err != nil {
			return err
		}
		f.Drain(uintptr(s))
		got := f.Floats(bufs[1], count*nranks)
		for j := range count {
			if want := float32(nranks * (nranks + 1) / 2); i%2 == 0 && got[j] != want {
				return fmt.Errorf("rank %d, operation %d: all_reduce element %d = %v, want %v", rank, i, j, got[j], want)
			}
		}
		for r := range nranks {
			if v := got[r*count]; i%2 == 1 && v != float32(r+1) {
				return fmt.Errorf("rank %d, operation %d: all_gather block %d = %v, want %v", rank, i, r, v, r+1)
			}
		}
		return nil
	}
	for i := range 4 { // warm-up: every kind of buffer and operation once
		if err := op(i); err != nil {
			return err
		}
	}
	before, err := cudatest.StrictCountersAt(os.Getenv("GONCCL_DEVTEST_FAKE"))
	if err != nil {
		return err
	}
	hostBefore := f.Counters()
	const ops = 40
	for i := range ops {
		if err := op(i); err != nil {
			return err
		}
	}
	after, err := cudatest.StrictCountersAt(os.Getenv("GONCCL_DEVTEST_FAKE"))
	if err != nil {
		return err
	}
	hostAfter := f.Counters()
	delta := after.Sub(before)
	fmt.Fprintf(log, "rank %d: hot path: %d allocations, %d frees, %d exports, %d opens, %d closes, %d drains in %d operations\n",
		rank, delta.DevAllocs, delta.DevFrees, delta.IpcExports, delta.IpcOpens, delta.IpcCloses, delta.Drains, ops)
	if delta != (cudatest.StrictCounters{}) || hostAfter.HostAllocs != hostBefore.HostAllocs || hostAfter.HostFrees != hostBefore.HostFrees {
		return fmt.Errorf("rank %d: the same-GPU path's operations after the first called the driver's allocation, free or IPC entry points: %+v (host allocations %d, frees %d)",
			rank, delta, hostAfter.HostAllocs-hostBefore.HostAllocs, hostAfter.HostFrees-hostBefore.HostFrees)
	}
	if err := barrier(c); err != nil {
		return err
	}
	return g.Close()
}
