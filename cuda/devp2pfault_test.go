package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// A dead or stalled peer in the middle of a device-path send or receive ends in an
// error naming it, the survivor's streams drained (cuda/devp2pwatch.go), as for the
// collectives (devfault_test.go, whose runFaultRanks runs these cases too).

func TestDeviceP2PPeerKilledMidSend(t *testing.T) {
	open(t)
	// Rank 2 enqueues a large send to rank 0 and a large receive from rank 1, then
	// SIGKILLs itself: rank 0's stream waits for chunks that never come, rank 1's
	// for slots rank 2 never drains.
	outs, took := runFaultRanks(t, "0,0,1", "p2p-kill")
	requireSurvivorsNamed(t, outs, 2, took)
}

func TestDeviceP2PStalledPeerTimesOut(t *testing.T) {
	open(t)
	// Rank 1 is alive but never enqueues its side: rank 0's receive from it and its
	// large send to it time out, naming it in both directions.
	outs, _ := runFaultRanks(t, "0,0", "p2p-stall")
	line := errLine(outs[0])
	require.Contains(t, line, "beyond the communicator's timeout", "%s", outs[0])
	require.Contains(t, line, "rank 1 has not sent", "%s", outs[0])
	require.Contains(t, line, "rank 1 has not received", "%s", outs[0])
	require.Contains(t, outs[0], "STREAM DRAINED", "%s", outs[0])
	require.Contains(t, outs[0], "NEXT OP REFUSED", "%s", outs[0])
}

// faultP2P is faultRank's point-to-point cases, after the agreed all_reduce.
func faultP2P(what string, sh *cuda.Shared, f *cudatest.Fake, s uintptr, dev, rank, nranks int, failed <-chan error, c *core.Comm) error {
	const big = 12000 // many chunks: the slots in flight cannot hold it
	src, dst := f.Malloc(dev, big), f.Malloc(dev, big)
	st := driver.Stream(s)
	var ops []cuda.P2POp
	switch {
	case what == "p2p-kill" && rank == nranks-1:
		ops = []cuda.P2POp{{Peer: 0, Buf: src, Bytes: big, Stream: st}, {Recv: true, Peer: 1, Buf: dst, Bytes: big, Stream: st}}
	case what == "p2p-kill" && rank == 0:
		ops = []cuda.P2POp{{Recv: true, Peer: nranks - 1, Buf: dst, Bytes: big, Stream: st}}
	case what == "p2p-kill" && rank == 1:
		ops = []cuda.P2POp{{Peer: nranks - 1, Buf: src, Bytes: big, Stream: st}}
	case what == "p2p-stall" && rank == 1:
		time.Sleep(2 * stallTimeout) // alive, but issuing nothing
		return nil
	case what == "p2p-stall":
		ops = []cuda.P2POp{{Recv: true, Peer: 1, Buf: dst, Bytes: 1000, Stream: st}, {Peer: 1, Buf: src, Bytes: big, Stream: st}}
	default:
		return fmt.Errorf("no case %q for rank %d", what, rank)
	}
	issued := time.Now()
	if err := sh.P2P(ops); err != nil {
		return fmt.Errorf("enqueueing: %w", err)
	}
	if what == "p2p-kill" && rank == nranks-1 {
		fmt.Println("victim: enqueued, dying")
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	var err error
	select {
	case err = <-failed:
	case <-time.After(3 * faultTimeout):
		return errors.New("no error within three timeouts")
	}
	fmt.Printf("ERROR: %v\n", err)
	fmt.Printf("after %v; communicator: %v\n", time.Since(issued).Round(time.Millisecond), c.Err())
	drained := make(chan struct{})
	go func() { f.Drain(s); close(drained) }()
	select {
	case <-drained:
		fmt.Println("STREAM DRAINED")
	case <-time.After(faultTimeout):
		return errors.New("the stream is still waiting on a flag after the error")
	}
	if err := sh.P2P([]cuda.P2POp{{Peer: 0, Buf: src, Bytes: 1, Stream: st}}); err != nil {
		fmt.Printf("NEXT OP REFUSED: %v\n", err)
	} else {
		return errors.New("a send after the failure was enqueued")
	}
	if err := sh.Close(time.Second); err == nil {
		return errors.New("Close freed a scratch that was released")
	}
	return nil
}

func TestDeviceP2PCloseReleasesAfterTimeout(t *testing.T) {
	d, f := open(t)
	// Rank 0 sends rank 1 a message that fits in the slots in flight (its stream does
	// not wait), which rank 1 never receives, then closes: Close's wait for rank 1 to
	// drain the slots times out, and must not leave the legacy default stream waiting
	// (every blocking stream of the context would wait behind it).
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	devs := []int{0, 1}
	comms := make([]*core.Comm, 2)
	shs := make([]*cuda.Shared, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], shs[r], errs[r] = p2pShared(d, f, id, r, devs)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		defer comms[r].Abort()
	}
	bad := f.Counters().BadAccess
	s := f.Stream(0)
	src := f.Malloc(0, 1000)
	require.NoError(t, shs[0].P2P([]cuda.P2POp{{Peer: 1, Buf: src, Bytes: 1000, Stream: driver.Stream(s)}}))
	f.Drain(s)
	err = shs[0].Close(300 * time.Millisecond)
	require.ErrorContains(t, err, "left mapped")
	// A blocking stream's work waits for the legacy default stream's.
	buf := f.Malloc(0, 4)
	require.NoError(t, f.Fill(s, buf, 1, 7, 0))
	drained := make(chan struct{})
	go func() { f.Drain(s); close(drained) }()
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatal("the legacy default stream still waits on a flag after Close gave up")
	}
	require.Error(t, shs[0].Close(time.Second), "a second Close freed the scratch its first left mapped")
	require.Equal(t, bad, f.Counters().BadAccess, "bad accesses (an event destroyed before its record ran?)")
	shs[1].Abandon()
}

// p2pShared makes rank rank's communicator and device scratch (ranks of one process).
func p2pShared(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int) (*core.Comm, *cuda.Shared, error) {
	nranks := len(devs)
	c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: 10 * time.Second})
	if err != nil {
		return nil, nil, err
	}
	ctx, err := d.StreamContext(driver.Stream(f.Stream(devs[rank])))
	if err == nil {
		var sh *cuda.Shared
		sh, err = cuda.NewShared(d, ctx, rank, nranks, devScratch, hostExchange(c))
		if err == nil {
			return c, sh, nil
		}
	}
	c.Abort()
	return nil, nil, err
}
