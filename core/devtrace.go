package core

import (
	"fmt"
	"time"
)

// The flight recorder's side of capi's device path. A device-path operation never
// reaches the executor: capi enqueues its work on a CUDA stream and returns, and the
// host never waits for it. So it is recorded here, in three steps:
//
//	IssueDeviceOp   the call: the communicator's next sequence number, state queued
//	DeviceOp.OnGPU  its work is on the stream: state started ("on the GPU"), with a
//	                poll that asks the GPU (a CUDA event recorded after the work)
//	                whether it has finished
//	DeviceOp.Failed enqueueing failed: state failed
//
// and the recorder turns a started entry completed when its poll first says so, which
// it asks lazily, whenever the trace is read (Comm.Trace, DumpTrace, the dump at a
// failure or at destroy). An entry still started in a dump is an operation the GPU has
// not finished: what a hang on the device path leaves.
//
// Sequence numbers: a device-path operation takes the next one in issue order, as an
// executor operation does. Every rank issues the same collectives in the same order
// (the device path requires it, as the staged path does), so the numbers agree across
// ranks: dumps line up, and the executor's frames, whose headers carry the number and
// are compared by the receiver, still match.
//
// Its sends and receives are recorded alike, but numbered apart: see p2ptrace.go.

// DeviceOp is the flight-recorder entry of one device-path operation.
type DeviceOp struct {
	c     *Comm
	seq   uint64
	stamp int64 // hop timing: when it was issued
	// A group of sends and receives (IssueDeviceP2P): its entries in the recorder's
	// point-to-point ring, p2p..p2p+np2p-1 (p2p 0: the recorder is off).
	p2p  uint64
	np2p int
}

// IssueDeviceOp gives a device-path operation (kind, dtype, reduction, root or -1,
// count as the executor's operation would count it) the communicator's next sequence
// number and records it as queued. It fails if the communicator is closed.
func (c *Comm) IssueDeviceOp(kind Kind, dt DataType, redop RedOp, root, count int) (*DeviceOp, error) {
	stamp := hopNow()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("gonccl rank %d: %s: %w", c.rank, kind, ErrClosed)
	}
	c.seq++
	o := op{kind: kind, seq: c.seq, dtype: dt, redop: redop, root: root, count: count}
	c.issuedOp = o.String()
	c.trace.enqueuedDevice(&o)
	return &DeviceOp{c: c, seq: o.seq, stamp: stamp}, nil
}

// Seq is the operation's sequence number (0 for sends and receives).
func (d *DeviceOp) Seq() uint64 { return d.seq }

// OnGPU records that the operation's work is enqueued on its stream; done reports
// whether the GPU has finished it (it is called from whoever reads the trace, so it
// must be safe on any goroutine, and cheap: a cuEventQuery).
func (d *DeviceOp) OnGPU(done func() (bool, error)) {
	hopEnd(HopDevice, d.stamp)
	if d.np2p > 0 {
		d.c.trace.onGPUP2P(d.p2p, d.np2p, done)
		return
	}
	d.c.trace.onGPU(d.seq, done)
}

// Failed records that enqueueing the operation's work failed with err (not nil); the
// first failure of the communicator writes the dump, as an executor failure does.
func (d *DeviceOp) Failed(err error) {
	if d.np2p > 0 {
		if d.c.trace.failedP2P(d.p2p, d.np2p, err) {
			d.c.autoDump("failure: " + err.Error())
		}
		return
	}
	if d.c.trace.finished(d.seq, AlgoDirect, err) {
		d.c.autoDump("failure: " + err.Error())
	}
}

func (f *flightRecorder) enqueuedDevice(o *op) {
	if f == nil {
		return
	}
	f.enqueued(o)
	f.mu.Lock()
	if s := f.slot(o.seq); s != nil {
		s.device, s.algo = true, AlgoDirect
	}
	f.mu.Unlock()
}

func (f *flightRecorder) onGPU(seq uint64, done func() (bool, error)) {
	if f == nil {
		return
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	if s := f.slot(seq); s != nil && s.state == TraceQueued {
		s.state, s.started, s.poll = TraceStarted, now, done
	}
	f.mu.Unlock()
}

// pollDevice asks the GPU about every device-path entry on it, without holding the
// lock while it asks, and marks those it has finished completed (or failed, if the
// question fails).
func (f *flightRecorder) pollDevice() {
	type pending struct {
		seq  uint64
		p2p  bool
		poll func() (bool, error)
	}
	var ps []pending
	f.mu.Lock()
	for i := range f.ring {
		if s := &f.ring[i]; s.poll != nil && s.state == TraceStarted {
			ps = append(ps, pending{s.seq, false, s.poll})
		}
	}
	for i := range f.p2p {
		if s := &f.p2p[i]; s.poll != nil && s.state == TraceStarted {
			ps = append(ps, pending{s.seq, true, s.poll})
		}
	}
	f.mu.Unlock()
	for _, p := range ps {
		ok, err := p.poll()
		if !ok && err == nil {
			continue
		}
		now := time.Now().UnixNano()
		f.mu.Lock()
		s := f.slot(p.seq)
		if p.p2p {
			s = f.p2pSlot(p.seq)
		}
		if s != nil && s.state == TraceStarted {
			s.state, s.finished, s.poll = TraceCompleted, now, nil
			if err != nil {
				s.state, s.err = TraceFailed, fmt.Sprintf("asking the GPU whether the operation finished: %v", err)
			}
		}
		f.mu.Unlock()
	}
}
