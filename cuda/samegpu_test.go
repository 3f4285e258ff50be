package cuda_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
)

// The same-GPU path (cuda.SameGPU) against the fake driver, ranks in separate
// processes on one fake device: all_reduce for every dtype x reduction, buffers the
// driver exports (mapped by the launcher) and buffers it does not (through the rank's
// exchange buffer), in and out of place, each result compared byte for byte with
// core's host all_reduce on the same inputs. Each rank counts the GPU-side waits its
// process issued that another context could release: the same-GPU path issues none.

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
// the process that exported it).
func TestSameGPURanksOfOneProcess(t *testing.T) {
	d, f := open(t)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	devs := []int{0, 0, 0}
	var wg sync.WaitGroup
	errs := make([]error, len(devs))
	for r := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = sameGPURank(d, f, id, r, devs, os.Stderr)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// TestSameGPUTimeSliced runs the same script with the fake's contexts taking turns on
// the device (a slice of 500 us): a path that waited on the GPU for another process
// would hold its turn; this one never does, and its results are still right.
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
// to reach the operation ("samegpu-skip-event": the input copies are late, so it reads
// the previous contents), or one element off ("samegpu-offset").
func TestSameGPUWrongStepFails(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "samegpu")
	for _, f := range []string{"samegpu-skip-event", "samegpu-offset"} {
		t.Run(f, func(t *testing.T) {
			out, err := runDevRanks(t, "0,0", f, "300,3000")
			require.Error(t, err, "the %s fault went unnoticed:\n%s", f, out)
			require.Contains(t, out, "MISMATCH", "%s", out)
		})
	}
}

// TestGPUWaitCounterSeesTheDevicePath shows the counter the same-GPU tests assert is
// zero does count: the device path (Shared) waits on the GPU for its peers' flags.
func TestGPUWaitCounterSeesTheDevicePath(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "gpuwaits")
	out, err := runDevRanks(t, "0,0", "", "0,50")
	require.NoError(t, err, "%s", out)
}

// sameGPURank runs the same-GPU script as rank rank (GONCCL_DEVTEST_SCRIPT=samegpu),
// or one all_reduce on the device path to show the GPU-wait counter counts its waits
// (=gpuwaits).
func sameGPURank(d *cuda.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer c.Destroy()
	dev := devs[rank]
	s := cuda.Stream(f.Stream(dev))
	ctx, err := d.StreamContext(s)
	if err != nil {
		return err
	}
	exchange := func(rec []byte) ([]byte, error) {
		all := make([]byte, len(rec)*nranks)
		req, err := c.AllGather(rec, all, len(rec), core.Uint8)
		if err == nil {
			_, err = req.Wait(-1)
		}
		return all, err
	}
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
	g, err := cuda.NewSameGPU(d, ctx, rank, nranks, 30*time.Second, exchange)
	if err != nil {
		return err
	}
	var bad []string
	i := 0
	for _, dt := range []core.DataType{core.Float32, core.Float16, core.Bfloat16, core.Int64} {
		for _, op := range []core.RedOp{core.Sum, core.Prod, core.Min, core.Max, core.Avg} {
			for _, count := range []int{1, 1000, 4099} {
				i++
				got, want, err := runSameGPUCase(c, g, d, ctx, red, f, dev, s, rank, i, dt, op, count)
				if err != nil {
					return fmt.Errorf("case %d (%v %v %d): %w", i, dt, op, count, err)
				}
				if !bytes.Equal(got, want) {
					bad = append(bad, fmt.Sprintf("MISMATCH case %d %v %v count %d (%s)", i, dt, op, count, devFirstDiff(got, want)))
				}
			}
		}
	}
	if _, err := c.Barrier(); err != nil {
		return err
	}
	if err := g.Close(); err != nil {
		return err
	}
	after := f.Counters()
	fmt.Fprintf(log, "rank %d: time-slice switches %d\n", rank, after.TSSwitches-before.TSSwitches)
	if n := after.GPUWaits - before.GPUWaits; n != 0 {
		bad = append(bad, fmt.Sprintf("%d GPU-side waits across contexts", n))
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

// runSameGPUCase runs one all_reduce on the same-GPU path and on the host. The input
// reaches the device buffer through a copy on the rank's stream, so it is there only
// once the stream has run up to the operation. Cases alternate between buffers the
// driver exports and buffers it does not, differently on each rank, and in place.
func runSameGPUCase(c *core.Comm, g *cuda.SameGPU, d *cuda.Driver, ctx cuda.Context, red cuda.Reducer, f *cudatest.Fake,
	dev int, s cuda.Stream, rank, i int, dt core.DataType, op core.RedOp, count int) (got, want []byte, err error) {
	es := dt.Size()
	n := count * es
	in := devInput(dt, op, count, rank, i)
	want = make([]byte, n)
	req, err := c.AllReduce(in, want, count, dt, op)
	if err == nil {
		_, err = req.Wait(-1)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("host reference: %w", err)
	}
	exported := (i+rank)%2 == 0
	alloc := func() (uintptr, func(), error) {
		if !exported {
			p := f.Malloc(dev, n)
			return p, func() {}, nil
		}
		p, err := d.MemAlloc(ctx, n)
		return p, func() { d.MemFree(ctx, p) }, err
	}
	recv, freeRecv, err := alloc()
	if err != nil {
		return nil, nil, err
	}
	defer freeRecv()
	copy(f.Bytes(recv, n), bytes.Repeat([]byte{0xEE}, n))
	send := recv
	if i%3 != 0 {
		var freeSend func()
		if send, freeSend, err = alloc(); err != nil {
			return nil, nil, err
		}
		defer freeSend()
	}
	src := f.Malloc(dev, n)
	copy(f.Bytes(src, n), in)
	if err := d.CopyDtoD(ctx, s, send, src, n); err != nil {
		return nil, nil, err
	}
	if err := g.AllReduce(s, red, send, recv, count, dt, op); err != nil {
		return nil, nil, err
	}
	f.Drain(uintptr(s))
	return append([]byte(nil), f.Bytes(recv, n)...), want, nil
}
