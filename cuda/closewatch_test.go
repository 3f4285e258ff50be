package cuda_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
)

// TestCloseEndsOnTheCommunicatorsError: a peer that dies after issuing an operation
// this rank also issued, before the communicator has noticed, leaves this rank's Close
// waiting on the legacy default stream for the peer's reads. Close ends as soon as the
// communicator's error says the peer is lost (the Err the watcher was given), not at
// its timeout, and leaves the scratch mapped. Before, Close stopped the watcher and
// waited out its whole timeout (destroy_process_group and every kernel on torch's
// default stream held for the group's timeout).
func TestCloseEndsOnTheCommunicatorsError(t *testing.T) {
	d, f := open(t)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	devs := oneContextSafe(f, []int{0, 1})
	const n = 2
	comms := make([]*core.Comm, n)
	shs := make([]*cuda.Shared, n)
	reds := make([]cuda.Reducer, n)
	streams := make([]uintptr, n)
	bufs := make([]uintptr, n)
	var lost atomic.Bool
	commErr := func() error {
		if lost.Load() {
			return errors.New("rank 1 is lost: its connection closed")
		}
		return nil
	}
	inProcessRanks(t, n, func(r int) error {
		c, err := core.NewComm(id, n, r, core.Options{Timeout: time.Minute})
		if err != nil {
			return err
		}
		comms[r] = c
		streams[r] = f.Stream(devs[r])
		ctx, err := d.StreamContext(driver.Stream(streams[r]))
		if err != nil {
			return err
		}
		if shs[r], err = cuda.NewShared(d, ctx, r, n, devScratch, hostExchange(c)); err != nil {
			return err
		}
		if reds[r], err = reducerFor(d, ctx); err != nil {
			return err
		}
		shs[r].Watch(cuda.WatchConfig{Timeout: func() time.Duration { return time.Minute }, Err: commErr, Fail: func(error) {}})
		bufs[r] = f.Malloc(devs[r], 4096)
		return shs[r].AllReduce(driver.Stream(streams[r]), reds[r], bufs[r], bufs[r], 1000, core.Float32, core.Sum)
	})
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	for r := range n {
		f.Drain(streams[r])
	}
	// Rank 0 issues a second operation; rank 1 "dies" before issuing it.
	require.NoError(t, shs[0].AllReduce(driver.Stream(streams[0]), reds[0], bufs[0], bufs[0], 1000, core.Float32, core.Sum))
	time.AfterFunc(300*time.Millisecond, func() { lost.Store(true) })
	const timeout = 20 * time.Second
	start := time.Now()
	var wg sync.WaitGroup
	var cerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		cerr = shs[0].Close(timeout)
	}()
	wg.Wait()
	took := time.Since(start)
	require.Error(t, cerr, "Close freed scratch a lost peer may still read")
	require.ErrorContains(t, cerr, "rank 1 is lost")
	require.Less(t, took, timeout/4, "Close waited for its timeout though the communicator had failed: %v", cerr)
	f.Drain(streams[0]) // the waits Close left on the stream were released
}
