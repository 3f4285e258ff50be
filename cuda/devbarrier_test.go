package cuda_test

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
)

// TestDeviceBarrierHoldsEveryStream: rank 0's stream is held before its barrier by a
// flag only the test writes; every other rank's stream, after its barrier, writes a
// marker. No marker may be written until the test releases rank 0, and all are once
// it does. Without the barrier's wait (the "skip-ready-wait" fault) the markers are
// written at once, and the test fails.
func TestDeviceBarrierHoldsEveryStream(t *testing.T) {
	_, f := open(t)
	for _, fault := range []string{"", "skip-ready-wait"} {
		t.Run("fault="+fault, func(t *testing.T) {
			held := barrierHolds(t, oneContextSafe(f, []int{0, 0, 1, 0}), fault)
			if fault == "" {
				require.True(t, held, "a stream passed the barrier before rank 0 reached it")
			} else {
				require.False(t, held, "the barrier test cannot tell a barrier that does not wait")
			}
		})
	}
}

// barrierHolds runs the test on ranks of devices devs (goroutines of this process)
// and reports whether the barrier held the other ranks until rank 0 was released.
func barrierHolds(t *testing.T, devs []int, fault string) bool {
	d, f := open(t)
	cuda.SetTestFault(fault)
	defer cuda.SetTestFault("")
	n := len(devs)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	shs := make([]*cuda.Shared, n)
	streams := make([]driver.Stream, n)
	ctxs := make([]driver.Context, n)
	comms := make([]*core.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		streams[r] = driver.Stream(f.Stream(devs[r]))
		ctxs[r], err = d.StreamContext(streams[r])
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := core.NewComm(id, n, r, core.Options{Timeout: 30 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			comms[r] = c
			shs[r], errs[r] = cuda.NewShared(d, ctxs[r], r, n, devScratch, hostExchange(c))
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	defer func() {
		for _, c := range comms {
			c.Destroy()
		}
	}()
	gate := f.Malloc(devs[0], 4)
	f.Write(gate, make([]byte, 4))
	markers := make([]uintptr, n)
	for r := range n {
		markers[r] = f.Malloc(devs[r], 4)
		f.Write(markers[r], make([]byte, 4))
	}
	require.NoError(t, d.Do(ctxs[0], func() error { return d.StreamWaitValue32(streams[0], gate, 1) }))
	for r := range n {
		require.NoError(t, shs[r].Barrier(streams[r]))
		require.NoError(t, d.Do(ctxs[r], func() error { return d.StreamWriteValue32(streams[r], markers[r], 7) }))
	}
	time.Sleep(200 * time.Millisecond)
	held := true
	for r := 1; r < n; r++ {
		if binary.LittleEndian.Uint32(f.Read(markers[r], 4)) != 0 {
			held = false
		}
	}
	f.Write(gate, []byte{1, 0, 0, 0})
	for r := range n {
		f.Drain(uintptr(streams[r]))
		require.Equal(t, uint32(7), binary.LittleEndian.Uint32(f.Read(markers[r], 4)), "rank %d's stream after the barrier", r)
	}
	closeErrs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); closeErrs[r] = shs[r].Close(30 * time.Second) }()
	}
	wg.Wait()
	for r, err := range closeErrs {
		require.NoError(t, err, "rank %d", r)
	}
	return held
}
