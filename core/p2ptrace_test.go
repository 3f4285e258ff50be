package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Device-path sends and receives (capi's, recorded through IssueDeviceP2P) in the
// flight recorder, with a stand-in for the GPU's event.

// p2pShape is what a test expects of a send/recv entry.
type p2pShape struct {
	kind   Kind
	peer   int
	pseq   uint64
	after  uint64
	count  uint64
	state  TraceState
	failed string
}

func requireP2P(t *testing.T, want []p2pShape, got []TraceEntry, rank int) {
	t.Helper()
	var p2p []TraceEntry
	for _, e := range got {
		if e.IsP2P() {
			p2p = append(p2p, e)
		}
	}
	require.Len(t, p2p, len(want), "rank %d: %+v", rank, got)
	for i, w := range want {
		e := p2p[i]
		require.Equal(t, w.kind, e.Kind, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, w.peer, e.Peer, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, w.pseq, e.P2PSeq, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, w.after, e.Seq, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, w.count, e.Count, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, 4*w.count, e.Bytes, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, Float32, e.DType, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, PathDevice, e.Path, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, AlgoDirect, e.Algo, "rank %d entry %d: %+v", rank, i, e)
		require.Equal(t, w.state, e.State, "rank %d entry %d: %+v", rank, i, e)
		require.Contains(t, e.Err, w.failed, "rank %d entry %d: %+v", rank, i, e)
		if w.state != TraceFailed { // failed to enqueue: never started
			require.Equal(t, w.state == TraceQueued, e.Started.IsZero(), "rank %d entry %d: %+v", rank, i, e)
		}
		require.Equal(t, w.state < TraceCompleted, e.Finished.IsZero(), "rank %d entry %d: %+v", rank, i, e)
	}
}

func TestDeviceSendRecvInTheFlightRecorder(t *testing.T) {
	comms := memComms(t, 2, func(c *config) { c.traceSize = 16 })
	var gpuDone atomic.Bool
	gpu := func() (bool, error) { return gpuDone.Load(), nil }
	f32 := func(recv bool, peer, count int) P2PRecord {
		return P2PRecord{Recv: recv, Peer: peer, DType: Float32, Count: count}
	}
	// A pipeline's step: rank 0 sends twice to rank 1 (a group of two, then one) and
	// receives once; rank 1 the other way round.
	ops := make([]*DeviceOp, 0, 4)
	for r, c := range comms {
		d, err := c.IssueDeviceP2P([]P2PRecord{f32(r == 1, 1-r, 10), f32(r == 0, 1-r, 20)})
		require.NoError(t, err)
		require.Zero(t, d.Seq())
		send, recv := kinds(r)
		requireP2P(t, []p2pShape{{send, 1 - r, 1, 0, 10, TraceQueued, ""}, {recv, 1 - r, 1, 0, 20, TraceQueued, ""}}, c.Trace(), r)
		d.OnGPU(gpu)
		d2, err := c.IssueDeviceP2P([]P2PRecord{f32(r == 1, 1-r, 30)})
		require.NoError(t, err)
		ops = append(ops, d, d2)
	}
	// Neither took a collective's number: the ranks' next collective still matches.
	for _, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(make([]byte, 8), make([]byte, 8), 2, Float32, Sum)
	}) {
		require.NoError(t, err, "the collective after device sends and receives: the ranks' frames must still match")
	}
	ops[1].OnGPU(gpu)
	ops[3].OnGPU(gpu)
	for r, c := range comms {
		send, recv := kinds(r)
		tr := c.Trace()
		requireP2P(t, []p2pShape{{send, 1 - r, 1, 0, 10, TraceStarted, ""}, {recv, 1 - r, 1, 0, 20, TraceStarted, ""},
			{send, 1 - r, 2, 0, 30, TraceStarted, ""}}, tr, r)
		require.Len(t, tr, 4, "rank %d: %+v", r, tr)
		require.Equal(t, KindAllReduce, tr[3].Kind, "in issue order: %+v", tr)
		require.Equal(t, uint64(1), tr[3].Seq)
		require.Zero(t, tr[3].Peer)
	}
	gpuDone.Store(true)
	for r, c := range comms {
		send, recv := kinds(r)
		requireP2P(t, []p2pShape{{send, 1 - r, 1, 0, 10, TraceCompleted, ""}, {recv, 1 - r, 1, 0, 20, TraceCompleted, ""},
			{send, 1 - r, 2, 0, 30, TraceCompleted, ""}}, c.Trace(), r)
	}

	// After the all_reduce (seq 1): rank 0 sends a third time and rank 1 never posts
	// the receive. Its entry stays on the GPU; the watcher's release fails it.
	gpuDone.Store(false)
	d, err := comms[0].IssueDeviceP2P([]P2PRecord{f32(false, 1, 40)})
	require.NoError(t, err)
	d.OnGPU(gpu)
	stuck := p2pShape{KindSend, 1, 3, 1, 40, TraceStarted, ""}
	requireP2P(t, []p2pShape{{KindSend, 1, 1, 0, 10, TraceCompleted, ""}, {KindRecv, 1, 1, 0, 20, TraceCompleted, ""},
		{KindSend, 1, 2, 0, 30, TraceCompleted, ""}, stuck}, comms[0].Trace(), 0)
	dir := t.TempDir()
	path := filepath.Join(dir, "stuck.json")
	require.NoError(t, comms[0].DumpTrace(path))
	last := lastDumped(t, path)
	require.Equal(t, "send", last["op"])
	require.Equal(t, float64(1), last["peer"])
	require.Equal(t, float64(3), last["p2p_seq"])
	require.Equal(t, float64(1), last["seq"])
	require.Equal(t, "started", last["state"])
	require.Equal(t, "device", last["path"])
	require.Equal(t, float64(160), last["bytes"])
	require.Nil(t, last["finished"])

	cause := fmt.Errorf("%w: rank 0: device-path send to rank 1 has been on the GPU for 2s", ErrTimeout)
	comms[0].FailDevice(cause)
	stuck.state, stuck.failed = TraceFailed, "released: "+cause.Error()
	requireP2P(t, []p2pShape{{KindSend, 1, 1, 0, 10, TraceCompleted, ""}, {KindRecv, 1, 1, 0, 20, TraceCompleted, ""},
		{KindSend, 1, 2, 0, 30, TraceCompleted, ""}, stuck}, comms[0].Trace(), 0)
	gpuDone.Store(true) // what the GPU says after the release changes nothing
	require.Equal(t, TraceFailed, comms[0].Trace()[4].State)
}

// kinds returns rank r's send and receive kinds in a test where rank 0 sends first:
// rank 1 receives first.
func kinds(r int) (first, second Kind) {
	if r == 1 {
		return KindRecv, KindSend
	}
	return KindSend, KindRecv
}

func lastDumped(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var tf struct {
		Ops []map[string]any `json:"ops"`
	}
	require.NoError(t, json.Unmarshal(b, &tf))
	require.NotEmpty(t, tf.Ops)
	return tf.Ops[len(tf.Ops)-1]
}

func TestDeviceSendRecvFailedAndRing(t *testing.T) {
	comms := memComms(t, 1, func(c *config) { c.traceSize = 4 })
	c := comms[0]
	_, err := c.IssueDeviceP2P([]P2PRecord{{Peer: 1, DType: Float32, Count: 1}})
	require.ErrorIs(t, err, ErrInvalidArgument, "peer 1 of a communicator of 1")
	d, err := c.IssueDeviceP2P([]P2PRecord{{Peer: 0, DType: Float32, Count: 1}, {Recv: true, Peer: 0, DType: Float32, Count: 1}})
	require.NoError(t, err)
	d.Failed(errors.New("cuMemcpyDtoDAsync: boom"))
	requireP2P(t, []p2pShape{{KindSend, 0, 1, 0, 1, TraceFailed, "boom"}, {KindRecv, 0, 1, 0, 1, TraceFailed, "boom"}}, c.Trace(), 0)
	// The ring keeps the last 4, numbered on.
	for range 5 {
		d, err := c.IssueDeviceP2P([]P2PRecord{{Peer: 0, DType: Float32, Count: 2}})
		require.NoError(t, err)
		d.OnGPU(func() (bool, error) { return true, nil })
	}
	var seqs []uint64
	for _, e := range c.Trace() {
		seqs = append(seqs, e.P2PSeq)
		require.Equal(t, TraceCompleted, e.State)
	}
	require.Equal(t, []uint64{3, 4, 5, 6}, seqs)
}

func TestDeviceSendRecvRecorderOff(t *testing.T) {
	comms := memComms(t, 1, func(c *config) { c.traceSize = 0 })
	d, err := comms[0].IssueDeviceP2P([]P2PRecord{{Peer: 0, DType: Float32, Count: 1}})
	require.NoError(t, err)
	d.OnGPU(func() (bool, error) { return true, nil })
	d.Failed(errors.New("x"))
	require.Empty(t, comms[0].Trace())
}

// BenchmarkDeviceP2PRecord is the recorder's cost of one device-path send (issued,
// then on the GPU), beside a device-path collective's for comparison. Reading the
// trace (which asks the GPU about what is on it) is not part of it.
func BenchmarkDeviceP2PRecord(b *testing.B) {
	done := func() (bool, error) { return true, nil }
	b.Run("send", func(b *testing.B) {
		c := memComms(b, 1, func(c *config) { c.traceSize = 2000 })[0]
		recs := []P2PRecord{{Peer: 0, DType: Float32, Count: 2}}
		b.ReportAllocs()
		for range b.N {
			d, err := c.IssueDeviceP2P(recs)
			if err != nil {
				b.Fatal(err)
			}
			d.OnGPU(done)
		}
	})
	b.Run("all_reduce", func(b *testing.B) {
		c := memComms(b, 1, func(c *config) { c.traceSize = 2000 })[0]
		b.ReportAllocs()
		for range b.N {
			d, err := c.IssueDeviceOp(KindAllReduce, Float32, Sum, -1, 2)
			if err != nil {
				b.Fatal(err)
			}
			d.OnGPU(done)
		}
	})
}
