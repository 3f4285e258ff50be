package core

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Device-path operations (capi's, recorded through IssueDeviceOp) in the flight
// recorder and the communicator's sequence, with a stand-in for the GPU's event.

func TestDeviceOpsTakeTheNextSeq(t *testing.T) {
	comms := memComms(t, 2, func(c *config) { c.traceSize, c.debugHops = 16, true })
	HopStats(true)
	var gpuDone atomic.Bool
	ops := make([]*DeviceOp, len(comms))
	for i, c := range comms {
		d, err := c.IssueDeviceOp(KindBroadcast, Int32, Sum, 1, 10)
		require.NoError(t, err)
		require.Equal(t, uint64(1), d.Seq())
		require.Equal(t, TraceQueued, c.Trace()[0].State, "not on the GPU yet")
		d.OnGPU(func() (bool, error) { return gpuDone.Load(), nil })
		ops[i] = d
	}
	require.Equal(t, int64(2), HopStats(true)[HopDevice].Count, "the hop issue -> on the stream, once per op")
	for _, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(make([]byte, 8), make([]byte, 8), 2, Float32, Sum)
	}) {
		require.NoError(t, err, "the staged op after a device op: the ranks' frames must still match")
	}
	for rank, c := range comms {
		tr := c.Trace()
		require.Len(t, tr, 2)
		require.Equal(t, TraceEntry{Seq: 1, Kind: KindBroadcast, Path: PathDevice, DType: Int32, RedOp: Sum,
			Algo: AlgoDirect, State: TraceStarted, Root: 1, Count: 10, Bytes: 40,
			Enqueued: tr[0].Enqueued, Started: tr[0].Started}, tr[0], "rank %d", rank)
		require.Equal(t, PathHost, tr[1].Path)
		require.Equal(t, uint64(2), tr[1].Seq)
		require.Equal(t, TraceCompleted, tr[1].State)
	}
	gpuDone.Store(true)
	for _, c := range comms {
		e := c.Trace()[0]
		require.Equal(t, TraceCompleted, e.State)
		require.False(t, e.Finished.Before(e.Started))
	}
	// A failure to enqueue, and a GPU that cannot be asked.
	d, err := comms[0].IssueDeviceOp(KindAllReduce, Float32, Max, -1, 1)
	require.NoError(t, err)
	d.Failed(errors.New("cuLaunchKernel: boom"))
	d, err = comms[0].IssueDeviceOp(KindAllReduce, Float32, Max, -1, 1)
	require.NoError(t, err)
	d.OnGPU(func() (bool, error) { return false, errors.New("cuEventQuery: illegal address") })
	tr := comms[0].Trace()
	require.Equal(t, TraceFailed, tr[2].State)
	require.Equal(t, "cuLaunchKernel: boom", tr[2].Err)
	require.Equal(t, TraceFailed, tr[3].State)
	require.Contains(t, tr[3].Err, "illegal address")
}

// TestRankThatSkipsADeviceOpIsAMismatch: a rank that did not issue a device-path
// operation the others did is one sequence number behind, which the next staged
// operation's frames show.
func TestRankThatSkipsADeviceOpIsAMismatch(t *testing.T) {
	comms := memComms(t, 2, nil)
	_, err := comms[0].IssueDeviceOp(KindAllReduce, Float32, Sum, -1, 4)
	require.NoError(t, err)
	for rank, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(make([]byte, 8), make([]byte, 8), 2, Float32, Sum)
	}) {
		require.ErrorIs(t, err, ErrMismatch, "rank %d", rank)
	}
}
