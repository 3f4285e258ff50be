package core

import (
	"fmt"
	"time"
)

// Point-to-point in the flight recorder: capi's device-path sends and receives. They
// are recorded as its device-path collectives are (devtrace.go: queued, then started
// once on the GPU, completed when the GPU has finished them, failed if enqueueing
// fails or the watcher releases the streams), one entry per send or receive, a
// group's included, but numbered apart: only two ranks call a send and its receive,
// so they cannot take the communicator's sequence numbers, which every rank must
// count alike. An entry of a send or receive has
//
//	Seq     the sequence number of the last collective issued before it (0: none),
//	        which places it among the collectives
//	Peer    the rank it sends to or receives from
//	P2PSeq  its number among this rank's sends to Peer (receives from Peer), from 1:
//	        the device path matches a send and its receive in that order per pair of
//	        ranks, so the n-th send of rank a to rank b is received by the n-th
//	        receive of b from a, and the two entries have the same P2PSeq
//
// They live in a ring of their own (as large as the collectives' one, made at the
// first), so that they never push collectives out.

// KindSend and KindRecv are the kinds of the flight recorder's point-to-point
// entries. They are not collectives: no frame carries them.
const (
	KindSend Kind = 64
	KindRecv Kind = 65
)

// P2PRecord is what the flight recorder says of one device-path send (Recv false) or
// receive: its peer and count elements of dtype.
type P2PRecord struct {
	Recv  bool
	Peer  int
	DType DataType
	Count int
}

// IssueDeviceP2P records a group of device-path sends and receives, enqueued
// together, as queued, one entry each; the returned DeviceOp moves them all on
// (OnGPU, Failed). It fails if the communicator is closed or a peer is not a rank.
func (c *Comm) IssueDeviceP2P(ops []P2PRecord) (*DeviceOp, error) {
	stamp := hopNow()
	c.mu.Lock()
	closed, after := c.closed, c.seq
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("gonccl rank %d: send/recv: %w", c.rank, ErrClosed)
	}
	for _, o := range ops {
		if o.Peer < 0 || o.Peer >= c.nranks {
			return nil, invalidf("send/recv: peer %d is not a rank of a communicator of %d", o.Peer, c.nranks)
		}
	}
	first := c.trace.enqueuedP2P(ops, after)
	return &DeviceOp{c: c, stamp: stamp, p2p: first, np2p: len(ops)}, nil
}

// enqueuedP2P records ops as queued and returns the ring index of the first (0 if
// the recorder is off).
func (f *flightRecorder) enqueuedP2P(ops []P2PRecord, after uint64) uint64 {
	if f == nil || len(ops) == 0 {
		return 0
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.p2p == nil {
		f.p2p = make([]traceSlot, len(f.ring))
		f.p2pCount = make([]uint64, 2*f.nranks)
	}
	first := f.p2pN + 1
	for _, o := range ops {
		f.p2pN++
		k, n := KindSend, &f.p2pCount[2*o.Peer]
		if o.Recv {
			k, n = KindRecv, &f.p2pCount[2*o.Peer+1]
		}
		*n++
		f.p2p[(f.p2pN-1)%uint64(len(f.p2p))] = traceSlot{seq: f.p2pN, kind: k, dtype: o.DType, algo: AlgoDirect,
			root: -1, count: uint64(o.Count), enqueued: now, device: true, peer: int32(o.Peer), pseq: *n, after: after}
	}
	return first
}

// p2pSlot returns the slot of point-to-point entry i if it still holds it. mu held.
func (f *flightRecorder) p2pSlot(i uint64) *traceSlot {
	if f.p2p == nil {
		return nil
	}
	s := &f.p2p[(i-1)%uint64(len(f.p2p))]
	if s.seq != i {
		return nil
	}
	return s
}

// onGPUP2P marks entries first..first+n-1 started, with poll done.
func (f *flightRecorder) onGPUP2P(first uint64, n int, done func() (bool, error)) {
	if f == nil || first == 0 {
		return
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	for i := first; i < first+uint64(n); i++ {
		if s := f.p2pSlot(i); s != nil && s.state == TraceQueued {
			s.state, s.started, s.poll = TraceStarted, now, done
		}
	}
	f.mu.Unlock()
}

// failedP2P marks entries first..first+n-1 failed with err; true if this is the
// recorder's first failure.
func (f *flightRecorder) failedP2P(first uint64, n int, err error) (firstFailure bool) {
	if f == nil {
		return false
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := first; first != 0 && i < first+uint64(n); i++ {
		if s := f.p2pSlot(i); s != nil && s.state != TraceFailed {
			s.state, s.finished, s.poll, s.err = TraceFailed, now, nil, err.Error()
		}
	}
	if !f.dumpedFail {
		f.dumpedFail = true
		return true
	}
	return false
}

// p2pEntries returns the point-to-point entries, oldest first. mu held.
func (f *flightRecorder) p2pEntries() []TraceEntry {
	if f.p2pN == 0 {
		return nil
	}
	first := uint64(1)
	if n := uint64(len(f.p2p)); f.p2pN > n {
		first = f.p2pN - n + 1
	}
	out := make([]TraceEntry, 0, f.p2pN-first+1)
	for i := first; i <= f.p2pN; i++ {
		if s := f.p2pSlot(i); s != nil {
			out = append(out, s.entry())
		}
	}
	return out
}

// mergeByTime merges a and b, each oldest first, by the time they were enqueued (a's
// first on a tie).
func mergeByTime(a, b []TraceEntry) []TraceEntry {
	if len(b) == 0 {
		return a
	}
	out := make([]TraceEntry, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if b[0].Enqueued.Before(a[0].Enqueued) {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
}

// IsP2P reports whether e is a send or receive (Peer and P2PSeq say with whom).
func (e *TraceEntry) IsP2P() bool { return e.Kind == KindSend || e.Kind == KindRecv }
