package core

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FailDevice: the device path's watcher found a failure the executor never saw. The
// communicator breaks with it (later operations fail naming it), and the device
// operations still on the GPU are marked failed.
func TestFailDeviceBreaksTheCommunicator(t *testing.T) {
	comms := memComms(t, 2, func(c *config) { c.traceSize = 16 })
	c := comms[0]
	done, err := c.IssueDeviceOp(KindAllReduce, Float32, Sum, -1, 4)
	require.NoError(t, err)
	done.OnGPU(func() (bool, error) { return true, nil })
	stuck, err := c.IssueDeviceOp(KindAllReduce, Float32, Sum, -1, 4)
	require.NoError(t, err)
	stuck.OnGPU(func() (bool, error) { return false, nil })
	require.Equal(t, TraceCompleted, c.Trace()[0].State)

	cause := fmt.Errorf("%w: rank 0: device-path all_reduce: rank 1 differs in count", ErrMismatch)
	c.FailDevice(cause)
	require.ErrorIs(t, c.Err(), ErrMismatch)
	require.ErrorContains(t, c.Err(), "rank 1 differs in count")
	tr := c.Trace()
	require.Equal(t, TraceCompleted, tr[0].State, "an op the GPU had finished stays completed")
	require.Equal(t, TraceFailed, tr[1].State)
	require.Contains(t, tr[1].Err, "released: ")
	req, err := c.AllReduce(make([]byte, 8), make([]byte, 8), 2, Float32, Sum)
	if err == nil {
		_, err = req.Wait(-1)
	}
	require.ErrorContains(t, err, "rank 1 differs in count", "a later operation names the cause")
}

// A device-path failure only one rank saw (its watcher named a mismatch) breaks every
// rank's communicator with it, passed on from peer to peer (devreport.go): rank 4 has
// no channel to rank 2, and learns it all the same. The error is of the same class and
// names the rank that saw it. A mismatch then replaces a peer's report of a timeout on
// the ranks that had only that report.
func TestFailDeviceTellsEveryRank(t *testing.T) {
	const n, namer = 5, 2
	comms := initAllTimeout(t, n, 30*time.Second)
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	require.Nil(t, comms[4].p2p.peer(namer), "rank 4 must learn it from the others")
	waitAll := func(skip int, want func(err error) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for r, c := range comms {
			for r != skip && !want(c.Err()) {
				require.True(t, time.Now().Before(deadline), "rank %d: %v", r, c.Err())
				time.Sleep(5 * time.Millisecond)
			}
		}
	}

	comms[0].FailDevice(fmt.Errorf("%w: rank 0: device-path all_reduce has been on the GPU for 8s: rank 2 has not finished it", ErrTimeout))
	waitAll(-1, func(err error) bool { return errors.Is(err, ErrTimeout) })
	for r, c := range comms[1:] {
		require.ErrorContains(t, c.Err(), "rank 0 reports: timed out: rank 0: device-path", "rank %d", r+1)
	}

	comms[namer].FailDevice(fmt.Errorf("%w: rank 2: device-path all_reduce: rank 1 differs in count: 1000 here, 3000 there", ErrMismatch))
	waitAll(0, func(err error) bool { return errors.Is(err, ErrMismatch) })
	require.ErrorIs(t, comms[0].Err(), ErrTimeout, "a rank's own cause is not replaced")
	for r, c := range comms[1:] {
		if r+1 == namer {
			require.ErrorContains(t, c.Err(), "mismatched operation: rank 2: device-path")
			continue
		}
		require.ErrorIs(t, c.Err(), ErrMismatch, "rank %d", r+1)
		require.ErrorContains(t, c.Err(), "rank 2 reports: mismatched operation: rank 2: device-path all_reduce: rank 1 differs in count", "rank %d", r+1)
		req, err := c.Barrier()
		if err == nil {
			_, err = req.Wait(-1)
		}
		require.ErrorIs(t, err, ErrMismatch, "rank %d: a later operation names the cause", r+1)
	}
}
