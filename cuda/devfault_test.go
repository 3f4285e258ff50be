package cuda_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// A dead peer or ranks that disagree on the device path end in an error naming the
// rank, not in streams waiting for ever (cuda/devfault.go). Each case runs the ranks
// as processes of the fake driver, the watcher wired to the communicator as capi
// wires it. Every rank first runs an all_reduce all agree on; then the case's
// operation. The survivors must see the error (naming the rank) and their stream must
// drain (released) well within the parent's deadline, which kills every child.

const (
	faultTimeout = 8 * time.Second // the communicator's timeout in the children
	stallTimeout = 2 * time.Second // the same, where the case waits it out
)

func TestDevicePathPeerKilledMidOp(t *testing.T) {
	open(t)
	// Rank 2 enqueues a three-round all_reduce and SIGKILLs itself at once, its
	// stream in the middle of it; ranks 0 and 1 are waiting on its flags.
	outs, took := runFaultRanks(t, "0,0,1", "kill")
	requireSurvivorsNamed(t, outs, 2, took)
}

// TestDevicePathKernelsQueuedForADeadPeerTouchNothing: rank 2 dies after the survivors
// enqueued a three-round all_reduce, never having enqueued its own part: the survivors'
// reduction kernels wait behind their streams' waits for its ready flag. Once their
// hosts learn of the death they release those waits, and the kernels run: each must
// find its abort word set (the host sets it before the release) and touch nothing, not
// reduce what the dead rank left in its scratch (memory that outlives its maker, still
// mapped: the fake counts kernels that read such memory). The survivors still name the
// rank, drain their streams (their contexts not faulted) and refuse the next operation.
// The one-shot all_reduce, the ring's and reduce_scatter each queue such kernels.
func TestDevicePathKernelsQueuedForADeadPeerTouchNothing(t *testing.T) {
	open(t)
	for _, op := range []string{"allreduce", "ring", "reducescatter"} {
		t.Run(op, func(t *testing.T) {
			outs, took := runFaultRanks(t, "0,0,1", "kill-queued-"+op)
			requireSurvivorsNamed(t, outs, 2, took)
			for r := range 2 {
				require.Contains(t, outs[r], "DEAD MAKER KERNEL READS 0\n", "rank %d: a released kernel read the dead rank's memory:\n%s", r, outs[r])
				require.Regexp(t, `KERNELS ABORTED [1-9]`, outs[r], "rank %d: no released kernel found its abort word set:\n%s", r, outs[r])
			}
		})
	}
}

// requireSurvivorsNamed checks that every rank but dead, the last, erred naming it,
// drained its stream and refused the next operation.
func requireSurvivorsNamed(t *testing.T, outs []string, dead int, took time.Duration) {
	t.Helper()
	for r := range dead {
		require.Contains(t, outs[r], "ERROR:", "rank %d:\n%s", r, outs[r])
		require.Regexp(t, fmt.Sprintf(`rank %d\b`, dead), errLine(outs[r]), "rank %d's error must name rank %d:\n%s", r, dead, outs[r])
		require.Contains(t, outs[r], "STREAM DRAINED", "rank %d:\n%s", r, outs[r])
		require.Contains(t, outs[r], "NEXT OP REFUSED", "rank %d:\n%s", r, outs[r])
	}
	t.Logf("survivors reported the dead rank within %v (communicator timeout %v)", took, faultTimeout)
}

func TestDevicePathStalledPeerTimesOut(t *testing.T) {
	open(t)
	// Rank 1 is alive (its heartbeats go on) but never enqueues the operation: rank 0
	// gives up at the communicator's timeout, naming it.
	outs, _ := runFaultRanks(t, "0,0", "stall")
	line := errLine(outs[0])
	require.Contains(t, line, "beyond the communicator's timeout", "%s", outs[0])
	require.Contains(t, line, "rank 1 has not reached it", "%s", outs[0])
	require.Contains(t, outs[0], "STREAM DRAINED", "%s", outs[0])
}

func TestDevicePathCountMismatch(t *testing.T) {
	open(t)
	// Rank 1 all_reduces 3000 floats (three rounds of the scratch), ranks 0 and 2
	// 1000 (one round). Every rank must name the mismatch, the count and the rank on
	// the other side (rank 1 for ranks 0 and 2; rank 0 or 2 for rank 1), its own
	// watcher having seen it or a peer having told it ("rank N reports: ..."), and
	// drain its stream and refuse the next op. Before the namers told the others, a
	// rank whose peers released their streams first could stop seeing the
	// disagreement and end at the timeout ("rank 2 has not finished it").
	outs, took := runFaultRanks(t, "0,0,1", "count")
	for r := range 3 {
		line := errLine(outs[r])
		require.Contains(t, line, "called different operations", "rank %d:\n%s", r, outs[r])
		require.Regexp(t, `differs in count: (1000 here, 3000 there|3000 here, 1000 there)`, line, "rank %d:\n%s", r, outs[r])
		other := `rank 1 (differs|reports)`
		if r == 1 {
			other = `rank [02] (differs|reports)`
		}
		require.Regexp(t, other, line, "rank %d must name the rank on the other side:\n%s", r, outs[r])
		require.Contains(t, outs[r], "COMMUNICATOR MISMATCH", "rank %d:\n%s", r, outs[r])
		require.Contains(t, outs[r], "STREAM DRAINED", "rank %d:\n%s", r, outs[r])
		require.Contains(t, outs[r], "NEXT OP REFUSED", "rank %d:\n%s", r, outs[r])
	}
	t.Logf("every rank named the mismatch within %v", took)
}

func TestDevicePathRootMismatch(t *testing.T) {
	open(t)
	// A broadcast whose ranks name different roots: neither root waits for the
	// other's data, so only the descriptor check can see it. Each rank names the
	// other and the roots, itself or told by the other.
	outs, _ := runFaultRanks(t, "0,1", "root")
	for r := range 2 {
		line := errLine(outs[r])
		require.Contains(t, line, "called different operations", "rank %d:\n%s", r, outs[r])
		require.Regexp(t, `rank [01] differs in root: (0 here, 1 there|1 here, 0 there)`, line, "rank %d:\n%s", r, outs[r])
		require.Regexp(t, fmt.Sprintf(`rank %d (differs|reports)`, 1-r), line, "rank %d:\n%s", r, outs[r])
		require.Contains(t, outs[r], "COMMUNICATOR MISMATCH", "rank %d:\n%s", r, outs[r])
		require.Contains(t, outs[r], "STREAM DRAINED", "rank %d:\n%s", r, outs[r])
	}
}

func errLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "ERROR:") {
			return l
		}
	}
	return ""
}

// runFaultRanks runs case what as one process per rank of layout and returns each
// rank's output and how long the ranks took. It fails the test if a rank that should
// survive did not exit 0 within the deadline.
func runFaultRanks(t *testing.T, layout, what string) ([]string, time.Duration) {
	t.Helper()
	// A rank's released streams still run the copies and kernels that read its peers'
	// scratch, after a peer was killed or, once the ranks gave up, exited: the scratch
	// outlives its maker (sharedmem.go), so those reads see memory that is there; the
	// fake faults on any read of memory that went with a dead process.
	rs := ranks{layout: layout, env: []string{"GONCCL_FAULTTEST=" + what, "FAKECUDA_DELAY_US=0,100"},
		limit: 60 * time.Second}
	if what == "kill" || strings.HasPrefix(what, "kill-queued-") || what == "p2p-kill" {
		rs.victims = []int{len(strings.Split(layout, ",")) - 1}
	}
	res := rs.run(t)
	for r, out := range res.outs {
		t.Logf("rank %d: %s", r, errLine(out))
	}
	require.False(t, res.timeout, "the ranks did not finish within 60 s (streams left waiting?):\n%s", res.all())
	require.NoError(t, res.err(), "%s", res.all())
	return res.outs, res.took
}

// faultChild is a child process's main for runFaultRanks.
func faultChild(what string) int {
	return childMain(func(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, _ *os.File) error {
		return faultRank(what, d, f, id, rank, devs)
	})
}

func faultRank(what string, d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int) error {
	nranks := len(devs)
	timeout := faultTimeout
	if what == "stall" || what == "p2p-stall" {
		timeout = stallTimeout
	}
	c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: timeout})
	if err != nil {
		return err
	}
	defer c.Abort()
	dev := devs[rank]
	s := f.Stream(dev)
	ctx, err := d.StreamContext(driver.Stream(s))
	if err != nil {
		return err
	}
	sh, err := cuda.NewShared(d, ctx, rank, nranks, devScratch, hostExchange(c))
	if err != nil {
		return err
	}
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	failed := make(chan error, 1)
	sh.Watch(cuda.WatchConfig{Timeout: c.Timeout, Err: c.Err, Fail: func(err error) {
		c.FailDevice(err)
		failed <- err
	}})
	buf := f.Malloc(dev, 3000*4)
	ones := func(n int) {
		b := f.Bytes(buf, n*4)
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(1))
		}
	}
	// An operation every rank agrees on: it must just work.
	ones(1000)
	if err := sh.AllReduce(driver.Stream(s), red, buf, buf, 1000, core.Float32, core.Sum); err != nil {
		return err
	}
	f.Drain(s)
	if got := f.Floats(buf, 1)[0]; got != float32(nranks) {
		return fmt.Errorf("the agreed all_reduce gave %v, want %d", got, nranks)
	}
	ones(3000)
	issued := time.Now()
	op, _ := strings.CutPrefix(what, "kill-queued-")
	if op != what {
		what = "kill-queued"
	}
	switch what {
	case "kill":
		err = sh.AllReduce(driver.Stream(s), red, buf, buf, 3000, core.Float32, core.Sum)
		if rank == nranks-1 {
			fmt.Println("victim: enqueued, dying")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	case "kill-queued":
		if rank == nranks-1 {
			// The survivors enqueue at once; this rank enqueues nothing and dies while
			// their kernels wait for its flags.
			time.Sleep(500 * time.Millisecond)
			fmt.Println("victim: dying without enqueuing")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		before, cerr := cudatest.StrictCountersAt(os.Getenv("GONCCL_DEVTEST_FAKE"))
		if cerr != nil {
			return cerr
		}
		defer func() {
			after, cerr := cudatest.StrictCountersAt(os.Getenv("GONCCL_DEVTEST_FAKE"))
			if cerr == nil {
				d := after.Sub(before)
				fmt.Printf("DEAD MAKER KERNEL READS %d\nKERNELS ABORTED %d\n", d.DeadMakerKernelReads, d.KernelsAborted)
			}
		}()
		switch op {
		case "allreduce":
			err = sh.AllReduce(driver.Stream(s), red, buf, buf, 3000, core.Float32, core.Sum)
		case "ring":
			err = sh.AllReduceRing(driver.Stream(s), red, buf, buf, 3000, core.Float32, core.Sum)
		case "reducescatter":
			err = sh.ReduceScatter(driver.Stream(s), red, buf, f.Malloc(dev, 1000*4), 1000, core.Float32, core.Sum)
		default:
			return fmt.Errorf("no kill-queued case %q", op)
		}
	case "stall":
		if rank == 1 {
			time.Sleep(2 * stallTimeout) // alive, but issuing nothing
			return nil
		}
		err = sh.AllReduce(driver.Stream(s), red, buf, buf, 1000, core.Float32, core.Sum)
	case "count":
		count := 1000
		if rank == 1 {
			count = 3000
		}
		err = sh.AllReduce(driver.Stream(s), red, buf, buf, count, core.Float32, core.Sum)
	case "root":
		err = sh.Broadcast(driver.Stream(s), buf, buf, 4000, rank)
	case "p2p-kill", "p2p-stall":
		return faultP2P(what, sh, f, s, dev, rank, nranks, failed, c)
	default:
		return fmt.Errorf("no case %q", what)
	}
	if err != nil {
		return fmt.Errorf("enqueueing: %w", err)
	}
	select {
	case err = <-failed:
	case <-time.After(3 * faultTimeout):
		return errors.New("no error within three timeouts")
	}
	fmt.Printf("ERROR: %v\n", err)
	fmt.Printf("after %v; communicator: %v\n", time.Since(issued).Round(time.Millisecond), c.Err())
	if errors.Is(c.Err(), core.ErrMismatch) {
		fmt.Println("COMMUNICATOR MISMATCH") // what the C ABI returns as goncclMismatch
	}
	drained := make(chan struct{})
	go func() { f.Drain(s); close(drained) }()
	select {
	case <-drained:
		fmt.Println("STREAM DRAINED")
	case <-time.After(faultTimeout):
		return errors.New("the stream is still waiting on a flag after the error")
	}
	if err := sh.AllReduce(driver.Stream(s), red, buf, buf, 1, core.Float32, core.Sum); err != nil {
		fmt.Printf("NEXT OP REFUSED: %v\n", err)
	} else {
		return errors.New("an operation after the failure was enqueued")
	}
	if err := sh.Close(time.Second); err == nil {
		return errors.New("Close freed a scratch that was released")
	}
	return nil
}
