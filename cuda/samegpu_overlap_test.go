package cuda_test

import (
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/samegpu"
)

// The same-GPU path overlaps the callers' compute: every rank's call returns once its
// part is on its stream, before any kernel of the operation ran, as the staged path's
// do. Three processes on one fake GPU; one rank's stream is held by a gate (a
// cuStreamWaitValue32 on host memory the test opens) queued before the operations, as
// a backward pass still running would hold it: the launcher's (rank 0), whose kernels
// then cannot run, or a follower's (rank 1), whose input is then not in place. Every
// rank runs two all_reduces (a buffer of cuMemAlloc and one the driver does not export:
// both through the followers' exchange buffers) and must return from both with the
// launcher's kernels not run and every output untouched; only then is the gate opened,
// and the results must be the sums. Before, a follower returned only once the
// launcher's kernels had run, and the launcher waited on the host for every peer's
// stream: with a gate, the calls ran into the path's timeout.
func TestSameGPUReturnsBeforeTheKernelsRan(t *testing.T) {
	open(t)
	for _, gated := range []int{0, 1} {
		t.Run(fmt.Sprintf("gate-rank-%d", gated), func(t *testing.T) {
			res := ranks{layout: "0,0,0", env: []string{"GONCCL_DEVTEST_SCRIPT=samegpu-overlap", "FAKECUDA_DELAY_US=0,50",
				"GONCCL_DEVTEST_GATED=" + strconv.Itoa(gated)}, limit: 60 * time.Second}.run(t)
			require.NoError(t, res.err(), "%s", res.all())
			for r := range 3 {
				require.Contains(t, res.outs[r], fmt.Sprintf("rank %d: RETURNED BEFORE THE KERNELS", r), "%s", res.all())
			}
		})
	}
}

// TestSameGPUReleasesStreamsOfADeadPeer: the survivors' calls returned with their
// streams waiting, stream-ordered, for a rank that then dies (SIGKILL) or stops
// (SIGSTOP) without its stream ever getting to the operation (its gate stays shut).
// Those waits must not hold the survivors' streams for ever: once the communicator
// has failed (heartbeats, 2 s here), each survivor's watcher writes into its own
// page the values its stream waits for, so its stream drains, its next operation is
// refused with an error naming the dead rank, and Close returns.
func TestSameGPUReleasesStreamsOfADeadPeer(t *testing.T) {
	open(t)
	for _, c := range []struct {
		name   string
		victim int
		how    string
	}{
		{"launcher-killed", 0, "kill"},  // the followers' streams wait for its kernels
		{"follower-stopped", 1, "stop"}, // the launcher's stream waits for its input, rank 2's for the launcher
	} {
		t.Run(c.name, func(t *testing.T) {
			res := ranks{layout: "0,0,0", env: []string{"GONCCL_DEVTEST_SCRIPT=samegpu-overlap-fault", "FAKECUDA_DELAY_US=0,50",
				"GONCCL_DEVTEST_GATED=" + strconv.Itoa(c.victim), "GONCCL_DEVTEST_VICTIM=" + strconv.Itoa(c.victim),
				"GONCCL_DEVTEST_HOW=" + c.how, "GONCCL_DEVTEST_DONE=" + t.TempDir() + "/launcher-closed",
				"GONCCL_HEARTBEAT_TIMEOUT_MS=" + strconv.Itoa(int(sameFaultHeartbeat.Milliseconds()))},
				victims: []int{c.victim}, limit: sameFaultTimeout + 30*time.Second}.run(t)
			require.False(t, res.timeout, "%s", res.all())
			require.NoError(t, res.err(), "%s", res.all())
			for r, out := range res.outs {
				if r == c.victim {
					continue
				}
				require.Contains(t, out, fmt.Sprintf("rank %d: RETURNED BEFORE THE KERNELS", r), "%s", res.all())
				require.Contains(t, out, "STREAM RELEASED", "%s", res.all())
				require.Regexp(t, fmt.Sprintf(`NEXT OP REFUSED: .*rank %d\b`, c.victim), out, "%s", res.all())
				took := afterLine(t, out)
				require.Less(t, took, sameFaultWithin, "rank %d's stream waited %v for rank %d", r, took, c.victim)
			}
		})
	}
}

// TestSameGPUDeadFollowersBuffersOutliveIt: the launcher reads and writes a follower
// of another process only through that follower's exchange buffer, memory that
// outlives its maker (cuMemCreate, shared as a file descriptor), whatever memory the
// follower's tensor is: torch's caching allocator's (cuMemAlloc, which CUDA IPC could
// export) or memory the driver will not export (fakecudaMalloc, as torch's expandable
// segments). The follower is killed (SIGKILL) with its stream held, so the launcher's
// stream, released once the communicator has failed, still runs the kernel over the
// dead follower's buffer: it must land in memory that is there, and every survivor's
// context must still work afterwards (a copy on its stream, synchronized). Where the
// launcher mapped the follower's own cuMemAlloc buffer with cuIpcOpenMemHandle, that
// memory went with the follower, and the fake faults as a GPU does (a sticky
// illegal-address error in the launcher's context, which kills it).
func TestSameGPUDeadFollowersBuffersOutliveIt(t *testing.T) {
	open(t)
	for _, bufs := range []string{"exported", "exchange"} {
		t.Run(bufs, func(t *testing.T) {
			res := ranks{layout: "0,0,0", env: []string{"GONCCL_DEVTEST_SCRIPT=samegpu-overlap-fault", "FAKECUDA_DELAY_US=0,50",
				"GONCCL_DEVTEST_GATED=1", "GONCCL_DEVTEST_VICTIM=1", "GONCCL_DEVTEST_HOW=kill", "GONCCL_DEVTEST_BUFS=" + bufs,
				"GONCCL_DEVTEST_DONE=" + t.TempDir() + "/launcher-closed",
				"GONCCL_HEARTBEAT_TIMEOUT_MS=" + strconv.Itoa(int(sameFaultHeartbeat.Milliseconds()))},
				victims: []int{1}, limit: sameFaultTimeout + 30*time.Second}.run(t)
			require.False(t, res.timeout, "%s", res.all())
			require.NoError(t, res.err(), "%s", res.all())
			for _, r := range []int{0, 2} {
				out := res.outs[r]
				require.NotContains(t, out, "FAULT", "%s", res.all())
				require.Contains(t, out, "STREAM RELEASED", "%s", res.all())
				require.Regexp(t, `NEXT OP REFUSED: .*rank 1\b`, out, "%s", res.all())
				require.Contains(t, out, fmt.Sprintf("rank %d: CONTEXT WORKS", r), "%s", res.all())
			}
		})
	}
}

// gate is a word of host memory registered with the GPU: a stream that waits on it
// (cuStreamWaitValue32 >= 1) is held until the host opens it.
type gate struct {
	mem []byte
	dev uintptr
}

func newGate(d *driver.Driver, ctx driver.Context) (*gate, error) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	g := &gate{mem: mem}
	err = d.Do(ctx, func() error {
		if err := d.HostRegister(unsafe.Pointer(&mem[0]), len(mem), 0x1|0x2); err != nil {
			return err
		}
		g.dev, err = d.HostDevicePointer(unsafe.Pointer(&mem[0]))
		return err
	})
	return g, err
}

func (g *gate) hold(d *driver.Driver, ctx driver.Context, s driver.Stream) error {
	return d.Do(ctx, func() error { return d.StreamWaitValue32(s, g.dev, 1) })
}

func (g *gate) open() { (*atomic.Uint32)(unsafe.Pointer(&g.mem[0])).Store(1) }

// sameGPUOverlapRank is a rank of the two tests above (GONCCL_DEVTEST_SCRIPT=
// samegpu-overlap or samegpu-overlap-fault).
func sameGPUOverlapRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	fault := os.Getenv("GONCCL_DEVTEST_SCRIPT") == "samegpu-overlap-fault"
	timeout := 20 * time.Second
	if fault {
		timeout = sameFaultTimeout
	}
	r, err := openRank(d, f, id, rank, devs, timeout)
	if err != nil {
		return err
	}
	defer r.c.Abort()
	c, dev, s, ctx := r.c, r.dev, r.s, r.ctx
	g, err := samegpu.NewSameGPU(d, ctx, rank, nranks, timeout, hostExchange(c))
	if err != nil {
		return err
	}
	g.Watch(c.Err)
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	gt, err := newGate(d, ctx)
	if err != nil {
		return err
	}
	const count = 1000
	exported, err := d.MemAllocIn(ctx, 4*count)
	if err != nil {
		return err
	}
	bufs := []uintptr{exported, f.Malloc(dev, 4*count)}
	switch os.Getenv("GONCCL_DEVTEST_BUFS") {
	case "exchange":
		bufs = bufs[1:] // only buffers the driver does not export
	case "exported":
		bufs = bufs[:1] // only cuMemAlloc memory, which CUDA IPC could map
	}
	in := make([]float32, count)
	for i := range in {
		in[i] = float32(rank + 1)
	}
	// The first round allocates the exchange buffer and maps the buffers (allocations
	// wait for the context's work: nothing is allocated once the sizes have been seen).
	for _, b := range bufs {
		if err := g.AllReduce(s, red, b, b, count, core.Float32, core.Sum); err != nil {
			return fmt.Errorf("rank %d: the first all_reduce: %w", rank, err)
		}
	}
	f.Drain(uintptr(s))
	for _, b := range bufs {
		f.SetFloats(b, in)
	}
	if err := barrier(c); err != nil {
		return err
	}
	gated, _ := strconv.Atoi(os.Getenv("GONCCL_DEVTEST_GATED"))
	if rank == gated {
		if err := gt.hold(d, ctx, s); err != nil {
			return err
		}
	}
	k0 := f.Counters().Kernels
	for i, b := range bufs {
		if err := g.AllReduce(s, red, b, b, count, core.Float32, core.Sum); err != nil {
			return fmt.Errorf("rank %d: all_reduce %d: %w", rank, i+1, err)
		}
	}
	if rank != gated {
		// Work that wrongly runs without the gate has time to show; and a gated rank
		// that opened its gate before every rank had looked (a barrier not waited
		// for) would be caught here every time.
		time.Sleep(20 * time.Millisecond)
	}
	if n := f.Counters().Kernels - k0; n != 0 {
		return fmt.Errorf("rank %d: %d kernels ran before the gate opened", rank, n)
	}
	for i, b := range bufs {
		if got := f.Floats(b, count); got[0] != in[0] || got[count-1] != in[0] {
			return fmt.Errorf("rank %d: all_reduce %d's output changed before the gate opened: %v", rank, i+1, got[0])
		}
	}
	fmt.Fprintf(log, "rank %d: RETURNED BEFORE THE KERNELS\n", rank)
	if fault {
		return sameGPUOverlapFault(d, ctx, g, f, s, red, bufs[0], count, rank, log)
	}
	// Every rank has looked: the gate opens, and the operations run.
	if err := barrier(c); err != nil {
		return err
	}
	if rank == gated {
		gt.open()
	}
	f.Drain(uintptr(s))
	want := float32(nranks * (nranks + 1) / 2)
	for i, b := range bufs {
		if got := f.Floats(b, count); got[0] != want || got[count-1] != want {
			return fmt.Errorf("rank %d: all_reduce %d gave %v, want %v", rank, i+1, got[0], want)
		}
	}
	if n := f.Counters().Kernels - k0; rank == 0 && n != 2 {
		return fmt.Errorf("rank 0: %d kernels ran, want 2", n)
	}
	if err := barrier(c); err != nil {
		return err
	}
	if err := g.Close(); err != nil {
		return err
	}
	return d.MemFreeIn(ctx, exported)
}

// sameGPUOverlapFault is the fault test's end of the script: the victim dies or stops
// with its gate shut; a survivor's stream must drain once the communicator has failed.
func sameGPUOverlapFault(d *driver.Driver, ctx driver.Context, g *samegpu.SameGPU, f *cudatest.Fake, s driver.Stream, red cuda.Reducer, buf uintptr, count, rank int, log *os.File) error {
	fallIfVictim(rank, log)
	start := time.Now()
	f.Drain(uintptr(s))
	fmt.Fprintf(log, "STREAM RELEASED\nAFTER %v\n", time.Since(start))
	err := g.AllReduce(s, red, buf, buf, count, core.Float32, core.Sum)
	if err == nil {
		return fmt.Errorf("rank %d: an operation after the failure ran", rank)
	}
	fmt.Fprintf(log, "NEXT OP REFUSED: %v\n", err)
	fmt.Fprintf(log, "close: %v\n", g.Close())
	if err := contextWorks(d, ctx, f, s, buf, count); err != nil {
		return fmt.Errorf("rank %d: after the failure: %w", rank, err)
	}
	fmt.Fprintf(log, "rank %d: CONTEXT WORKS\n", rank)
	done := os.Getenv("GONCCL_DEVTEST_DONE")
	if rank == 0 {
		return os.WriteFile(done, nil, 0o600)
	}
	if victim, _ := strconv.Atoi(os.Getenv("GONCCL_DEVTEST_VICTIM")); victim != 0 {
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if _, err := os.Stat(done); err == nil {
				return nil
			}
		}
		return fmt.Errorf("rank %d: the launcher never closed", rank)
	}
	return nil
}

// contextWorks checks that the context of a survivor still runs work: a copy of buf
// (count floats) on s into new memory, waited for, gives the same floats.
func contextWorks(d *driver.Driver, ctx driver.Context, f *cudatest.Fake, s driver.Stream, buf uintptr, count int) error {
	want := f.Floats(buf, count)
	dst, err := d.MemAllocIn(ctx, 4*count)
	if err != nil {
		return err
	}
	defer d.MemFreeIn(ctx, dst)
	if err := d.Do(ctx, func() error {
		if err := d.MemcpyDtoD(dst, buf, 4*count, s); err != nil {
			return err
		}
		return d.Sync(s)
	}); err != nil {
		return fmt.Errorf("a copy on the stream: %w", err)
	}
	got := f.Floats(dst, count)
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("a copy on the stream gave %v at %d, want %v", got[i], i, want[i])
		}
	}
	return nil
}
