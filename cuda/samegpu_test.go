package cuda_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/samegpu"
)

// The same-GPU path (samegpu.SameGPU) against the fake driver, ranks in separate
// processes on one fake device: all_reduce for every dtype x reduction, buffers of
// cuMemAlloc and buffers the driver does not export (both through the followers'
// exchange buffers), in and out of place, each result compared byte for byte with
// core's host all_reduce on the same inputs. Each rank counts the GPU-side waits its
// process issued that another context releases: the launcher's stream waits once per
// operation for each other rank's stream, each other rank's once for the launcher's
// kernels, and no more.

func TestSameGPUAcrossProcesses(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "samegpu")
	for _, layout := range []string{"0,0", "0,0,0", "0,0,0,0"} {
		t.Run(strings.ReplaceAll(layout, ",", "-"), func(t *testing.T) {
			out, err := runDevRanks(t, layout, "", "0,200")
			require.NoError(t, err, "%s", out)
		})
	}
}

// TestSameGPURanksOfOneProcess runs the ranks as goroutines of this process: the
// launcher uses the others' buffers and events as they are (CUDA opens no handle in
// the process that exported it). "composed" runs it with a Reducer that has no
// one-pass kernels: the path then composes each reduction from two-operand kernels, as
// it does for more ranks than one launch takes.
func TestSameGPURanksOfOneProcess(t *testing.T) {
	for _, reducer := range []string{"one-pass", "composed"} {
		t.Run(reducer, func(t *testing.T) {
			t.Setenv("GONCCL_DEVTEST_REDUCER", reducer)
			d, f := open(t)
			id, err := core.NewUniqueID()
			require.NoError(t, err)
			devs := []int{0, 0, 0}
			inProcessRanks(t, len(devs), func(r int) error { return sameGPURank(d, f, id, r, devs, os.Stderr) })
		})
	}
}

// TestSameGPUTimeSliced runs the same script with the fake's contexts taking turns on
// the device (a slice of 500 us): a stream waiting for another context keeps its turn,
// and the results are still right.
func TestSameGPUTimeSliced(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "samegpu")
	t.Setenv("FAKECUDA_TIMESLICE_US", "500")
	key := fmt.Sprintf("samegpu-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Setenv("FAKECUDA_TIMESLICE_KEY", key)
	defer os.Remove("/dev/shm/fakecuda-ts-" + key + "-0")
	out, err := runDevRanks(t, "0,0", "", "0,50")
	require.NoError(t, err, "%s", out)
	require.Regexp(t, `time-slice switches [1-9]`, out, "the contexts never took turns")
}

// TestSameGPUWrongStepFails shows the comparison catches a same-GPU path that gets
// one step wrong: the launcher reads a peer's input without waiting for its stream
// to reach the operation ("samegpu-skip-stream-wait": the input copies are late, so it reads
// the previous contents), or one element off ("samegpu-offset").
func TestSameGPUWrongStepFails(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "samegpu")
	requireFaultsCaught(t, "0,0", "300,3000", "samegpu-skip-stream-wait", "samegpu-offset")
}

// TestSameGPUMismatch: ranks that call different operations all get an error (naming
// rank 1 on the launcher), in the same operation, so the next one still runs.
func TestSameGPUMismatch(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "samegpu-mismatch")
	out, err := runDevRanks(t, "0,0,0", "", "0,50")
	require.NoError(t, err, "%s", out)
	require.Contains(t, out, "rank 0: cuda: the ranks called different operations on the same-GPU path: same-GPU all_reduce 1: rank 1 called another operation than rank 0", out)
}

// TestGPUWaitCounterSeesTheDevicePath shows the counter the same-GPU tests assert
// does count: the device path (Shared) waits on the GPU for its peers' flags.
func TestGPUWaitCounterSeesTheDevicePath(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "gpuwaits")
	out, err := runDevRanks(t, "0,0", "", "0,50")
	require.NoError(t, err, "%s", out)
}

// sameGPURank runs the same-GPU script as rank rank (GONCCL_DEVTEST_SCRIPT=samegpu),
// or one all_reduce on the device path to show the GPU-wait counter counts its waits
// (=gpuwaits).
func sameGPURank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	r, err := openRank(d, f, id, rank, devs, 60*time.Second)
	if err != nil {
		return err
	}
	defer r.c.Destroy()
	c, dev, s, ctx := r.c, r.dev, r.s, r.ctx
	exchange := hostExchange(c)
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	before := f.Counters()
	if os.Getenv("GONCCL_DEVTEST_SCRIPT") == "gpuwaits" {
		sh, err := cuda.NewShared(d, ctx, rank, nranks, devScratch, exchange)
		if err != nil {
			return err
		}
		buf := f.Malloc(dev, 4000)
		if err := sh.AllReduce(s, red, buf, buf, 1000, core.Float32, core.Sum); err != nil {
			return err
		}
		f.Drain(uintptr(s))
		if err := sh.Close(time.Minute); err != nil {
			return err
		}
		if n := f.Counters().GPUWaits - before.GPUWaits; n == 0 {
			return fmt.Errorf("rank %d: the device path's all_reduce counted no GPU-side waits", rank)
		}
		return nil
	}
	g, err := samegpu.NewSameGPU(d, ctx, rank, nranks, 30*time.Second, exchange)
	if err != nil {
		return err
	}
	if os.Getenv("GONCCL_DEVTEST_SCRIPT") == "samegpu-mismatch" {
		// Rank 1 reduces one element more than the others.
		buf, err := d.MemAllocIn(ctx, 4*16)
		if err != nil {
			return err
		}
		err = g.AllReduce(s, red, buf, buf, 10+min(rank, 1), core.Float32, core.Sum)
		fmt.Fprintf(log, "rank %d: %v\n", rank, err)
		if !errors.Is(err, samegpu.ErrSameGPUMismatch) {
			return fmt.Errorf("rank %d: mismatched all_reduce returned %v", rank, err)
		}
		// Every rank saw the mismatch in the same operation: the next one runs.
		if err := g.AllReduce(s, red, buf, buf, 10, core.Float32, core.Sum); err != nil {
			return fmt.Errorf("rank %d: the operation after a mismatch: %w", rank, err)
		}
		f.Drain(uintptr(s))
		return g.Close()
	}
	var bad []string
	// The cuMemAlloc buffers are freed after Close (the launcher maps none of them:
	// TestSameGPUFollowerFreesItsTensors frees them between operations).
	var frees []func()
	defer func() {
		for _, free := range frees {
			free()
		}
	}()
	composed := os.Getenv("GONCCL_DEVTEST_REDUCER") == "composed"
	if composed {
		red = twoOperandReducer{red}
	}
	for i, dc := range sameGPUCases(nranks) {
		k0 := f.Counters().Kernels
		got, want, err := runSameGPUCase(c, g, d, ctx, red, f, dev, s, rank, nranks, i+1, dc, &frees)
		if err != nil {
			return fmt.Errorf("case %d %+v: %w", i+1, dc, err)
		}
		if !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("MISMATCH case %d %+v (%s)", i+1, dc, devFirstDiff(got, want)))
		}
		// Only the launcher launches kernels (the ranks' own copies are not kernels).
		if n, w := f.Counters().Kernels-k0, sameGPULaunches(dc, nranks, composed); rank == 0 && n != w {
			bad = append(bad, fmt.Sprintf("LAUNCHES case %d %+v: %d kernels, want %d", i+1, dc, n, w))
		}
	}
	if err := barrier(c); err != nil {
		return err
	}
	if err := g.Close(); err != nil {
		return err
	}
	after := f.Counters()
	fmt.Fprintf(log, "rank %d: time-slice switches %d\n", rank, after.TSSwitches-before.TSSwitches)
	perOp := 1 // a follower's stream waits for the launcher's kernels
	if rank == 0 {
		perOp = nranks - 1 // the launcher's for each follower's stream
	}
	// Counted per process: ranks of one process (no GONCCL_DEVTEST_RANK) share them.
	if n, want := after.GPUWaits-before.GPUWaits, perOp*len(sameGPUCases(nranks)); os.Getenv("GONCCL_DEVTEST_RANK") != "" && n != want {
		bad = append(bad, fmt.Sprintf("%d GPU-side waits across contexts, want %d", n, want))
	}
	if n := after.BadAccess - before.BadAccess; n != 0 {
		bad = append(bad, fmt.Sprintf("%d bad accesses", n))
	}
	if len(bad) > 0 {
		fmt.Fprintln(log, strings.Join(bad, "\n"))
		return fmt.Errorf("rank %d: %d check(s) failed", rank, len(bad))
	}
	return nil
}

// twoOperandReducer hides the one-pass kernels of the Reducer it holds, so the same-GPU
// path composes its reductions from the two-operand kernels (as it does for more ranks
// than one launch takes).
type twoOperandReducer struct{ cuda.Reducer }

// sameGPULaunches is how many kernels the launcher runs for dc: all_reduce is one
// launch of a one-pass kernel, reduce_scatter one per rank; composed, every peer's
// input is one two-operand reduction, and avg adds a division.
func sameGPULaunches(dc devCase, nranks int, composed bool) int {
	avg := 0
	if dc.op == core.Avg {
		avg = 1
	}
	switch {
	case dc.coll == "all_reduce" && composed:
		return nranks - 1 + avg
	case dc.coll == "all_reduce":
		return 1
	case dc.coll == "reduce_scatter" && composed:
		return nranks * (nranks - 1 + avg)
	case dc.coll == "reduce_scatter":
		return nranks
	}
	return 0
}

// sameGPUCases: all_reduce and reduce_scatter for every dtype x reduction, all_gather
// and broadcast for every dtype, at a few counts, in and out of place.
func sameGPUCases(nranks int) []devCase {
	var cs []devCase
	for _, dt := range []core.DataType{core.Float32, core.Float16, core.Bfloat16, core.Int64} {
		for _, op := range []core.RedOp{core.Sum, core.Prod, core.Min, core.Max, core.Avg} {
			for _, count := range []int{1, 1000, 4099} {
				cs = append(cs, devCase{coll: "all_reduce", dt: dt, op: op, count: count, inPlace: count == 1000})
			}
			cs = append(cs, devCase{coll: "reduce_scatter", dt: dt, op: op, count: 777, inPlace: op == core.Max})
		}
		for _, count := range []int{1, 999} {
			cs = append(cs, devCase{coll: "all_gather", dt: dt, count: count, inPlace: count == 999})
			cs = append(cs, devCase{coll: "broadcast", dt: dt, count: count, root: count % nranks, inPlace: count == 1})
		}
	}
	return cs
}

// runSameGPUCase runs one case on the same-GPU path and on the host. The input reaches
// the device buffer through a copy on the rank's stream, so it is there only once the
// stream has run up to the operation. Cases alternate between buffers of cuMemAlloc and
// buffers the driver does not export, differently on each rank; the former are freed
// by the caller, after the path's Close (frees).
func runSameGPUCase(c *core.Comm, g *samegpu.SameGPU, d *driver.Driver, ctx driver.Context, red cuda.Reducer, f *cudatest.Fake,
	dev int, s driver.Stream, rank, nranks, i int, dc devCase, frees *[]func()) (got, want []byte, err error) {
	es := dc.dt.Size()
	inN, outN := dc.count, dc.count
	switch dc.coll {
	case "all_gather":
		outN = dc.count * nranks
	case "reduce_scatter":
		inN = dc.count * nranks
	}
	in := devInput(dc.dt, dc.op, inN, rank, i)
	want = make([]byte, outN*es)
	if err := hostReference(c, dc, in, want); err != nil {
		return nil, nil, err
	}
	exported := (i+rank)%2 == 0
	alloc := func(n int) (uintptr, func(), error) {
		if !exported {
			return f.Malloc(dev, n), func() {}, nil
		}
		p, err := d.MemAllocIn(ctx, n)
		if err == nil {
			*frees = append(*frees, func() { d.MemFreeIn(ctx, p) })
		}
		return p, func() {}, err
	}
	// In place: the input is the output (all_reduce, broadcast), the rank's block of
	// the output (all_gather), or the output is the rank's block of the input
	// (reduce_scatter).
	var send, recv uintptr
	switch {
	case dc.inPlace && dc.coll == "reduce_scatter":
		var free func()
		if send, free, err = alloc(inN * es); err != nil {
			return nil, nil, err
		}
		defer free()
		recv = send + uintptr(rank*outN*es)
	default:
		var free func()
		if recv, free, err = alloc(outN * es); err != nil {
			return nil, nil, err
		}
		defer free()
		switch {
		case dc.inPlace && dc.coll == "all_gather":
			send = recv + uintptr(rank*inN*es)
		case dc.inPlace:
			send = recv
		default:
			if send, free, err = alloc(inN * es); err != nil {
				return nil, nil, err
			}
			defer free()
		}
	}
	if !(dc.inPlace && dc.coll == "reduce_scatter") {
		copy(f.Bytes(recv, outN*es), bytes.Repeat([]byte{0xEE}, outN*es))
	}
	src := f.Malloc(dev, inN*es)
	copy(f.Bytes(src, inN*es), in)
	if err := d.CopyDevice(ctx, send, src, inN*es, s); err != nil {
		return nil, nil, err
	}
	switch dc.coll {
	case "all_reduce":
		err = g.AllReduce(s, red, send, recv, dc.count, dc.dt, dc.op)
	case "reduce_scatter":
		err = g.ReduceScatter(s, red, send, recv, dc.count, dc.dt, dc.op)
	case "all_gather":
		err = g.AllGather(s, send, recv, dc.count*es)
	case "broadcast":
		err = g.Broadcast(s, send, recv, dc.count*es, dc.root)
	}
	if err != nil {
		return nil, nil, err
	}
	f.Drain(uintptr(s))
	return append([]byte(nil), f.Bytes(recv, outN*es)...), want, nil
}

// TestSameGPURefusedWithoutShareableMemory: the same-GPU path's exchange buffers are
// memory that outlives its maker, shared as file descriptors; where the device cannot
// make it, the path is refused at setup on every rank, naming the device attribute
// (the device path's rule), rather than falling back to memory that dies with a peer.
func TestSameGPURefusedWithoutShareableMemory(t *testing.T) {
	for _, c := range []struct{ env, attr string }{
		{"FAKECUDA_NO_VMM", "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0"},
		{"FAKECUDA_NO_POSIX_FD", "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 0"},
	} {
		t.Run(c.env, func(t *testing.T) {
			d, f := open(t)
			t.Setenv(c.env, "1")
			id, err := core.NewUniqueID()
			require.NoError(t, err)
			devs := []int{0, 0}
			inProcessRanks(t, len(devs), func(rank int) error {
				r, err := openRank(d, f, id, rank, devs, 30*time.Second)
				if err != nil {
					return err
				}
				defer r.c.Destroy()
				g, err := samegpu.NewSameGPU(d, r.ctx, rank, len(devs), 30*time.Second, hostExchange(r.c))
				if err == nil {
					g.Close()
					return fmt.Errorf("rank %d: the same-GPU path was set up without fd-shareable memory", rank)
				}
				if !errors.Is(err, cuda.ErrNotShared) || !strings.Contains(err.Error(), c.attr) {
					return fmt.Errorf("rank %d: want a refusal naming %s, got: %w", rank, c.attr, err)
				}
				return nil
			})
		})
	}
}
