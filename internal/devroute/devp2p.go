package devroute

import (
	"fmt"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
)

// Point-to-point on the device path (cuda.Shared.P2P). A send or receive with a
// stream takes it when its communicator has already chosen the device path: that
// choice is collective (the scratch handles are exchanged with a host all-gather),
// so a send or receive, which only two ranks call, never makes it; until the
// communicator's first collective with a stream (a goncclBarrier will do), its sends
// and receives stage, on both ranks alike.
//
// On the device path a send and its receive are matched per pair of ranks in the
// order they are enqueued, as NCCL's are: tags play no part, GONCCL_ANY_SOURCE is
// refused, and both sides must pass device buffers (a send with a stream is never
// received by a receive without one). The call enqueues the work on its stream and
// returns. Blocking calls are enqueued on the caller's stream, as NCCL's: two ranks
// that both send first, ungrouped, messages too large for the slots in flight wait
// for each other there, as NCCL's would. goncclSendAsync/goncclRecvAsync are
// enqueued on a stream of the communicator's own per peer and direction, after the
// work queued on the caller's stream so far, and their request's event (for
// goncclRequestWaitStream) marks their end: like the staged ones, they progress
// whatever the order of the calls, and the send's buffer may be reused once a
// stream waits for its request. Inside goncclGroupStart/End the blocking goncclSend
// and goncclRecv are held until the outermost goncclGroupEnd, which enqueues them together, per
// communicator and stream, chunk by chunk in rounds (see cuda/devp2p.go), so that
// every exchange within a group progresses however large its messages. Everything
// else in a group runs where it is called, as before: collectives (device or
// staged), staged sends and receives, and goncclSendAsync/goncclRecvAsync, which
// are enqueued on their side streams at once, group or not (their request handle
// has its stream event at once). A group mixing held device-path sends with ones
// that ran at once is matched on each pair in the order the work was enqueued:
// issue the same mix on both ranks.

// deviceP2P is one send or receive on the device path, enqueued or held in a group.
type deviceP2P struct {
	e    *Comm
	c    *core.Comm
	v    *Views
	sh   *cuda.Shared
	op   cuda.P2POp
	rec  core.P2PRecord // what the flight recorder says of it
	done func(error)    // completes the caller's request once enqueued (held ones)
}

// TryDeviceP2P runs a send (recv false) or receive of b, count elements of dt with
// peer, on the device path if it applies (ok).
func (v *Views) TryDeviceP2P(c *core.Comm, recv bool, dt core.DataType, b buf, peer int, async bool) (req *core.Request, ok bool, err error) {
	if v.stream == 0 || v.e.devMode == devOff {
		return nil, false, nil
	}
	sh, err := v.decidedShared()
	if err != nil || sh == nil {
		return nil, false, err
	}
	if peer == core.AnySource {
		return nil, true, fmt.Errorf("%w: GONCCL_ANY_SOURCE: on the device path a receive names its sender (GONCCL_DEVICE_PATH=0 stages, and takes it)", errUsage)
	}
	if peer < 0 || peer >= c.Size() {
		return nil, true, fmt.Errorf("%w: peer %d is not a rank of a communicator of %d", core.ErrInvalidArgument, peer, c.Size())
	}
	if err := c.Err(); err != nil {
		return nil, true, err
	}
	sizes, err := v.deviceBufs(dt, []buf{b})
	if err != nil {
		return nil, true, err
	}
	size := sizes[0]
	d := &deviceP2P{e: v.e, c: c, v: v, sh: sh,
		op:  cuda.P2POp{Recv: recv, Peer: peer, Buf: uintptr(b.p), Bytes: size, Stream: v.stream},
		rec: core.P2PRecord{Recv: recv, Peer: peer, DType: dt, Count: size / dt.Size()}}
	if !async {
		if req, held := holdInGroup(d); held {
			return req, true, nil
		}
		req, err = enqueueP2P([]*deviceP2P{d})
		return req, true, err
	}
	side, err := v.sideStream(peer, recv)
	if err != nil || side == 0 {
		req, err = enqueueP2P([]*deviceP2P{d})
		return req, true, err
	}
	// On the side stream, after the work queued on the caller's stream so far; its
	// chunks enqueued by the host as the peer gets there (cuda/devp2plane.go), so the
	// side stream never waits on the GPU for another rank.
	sv := *v
	sv.stream, d.op.Stream = side, side
	later := func(enqueued func(error)) error {
		if err := sh.Follow(side, v.stream); err != nil {
			return err
		}
		if err := sh.P2PLater(d.op, enqueued); err != nil {
			return err
		}
		noteP2PSizes(c, []cuda.P2POp{d.op})
		return nil
	}
	req, err = sv.runDevice(c, devRecord{root: -1, p2p: []core.P2PRecord{d.rec}, later: later}, core.Uint8, nil)
	v.staging = sv.staging // the request's event: the end of the work on side
	return req, true, err
}

// sideKey names a side stream: the async sends to a peer, or receives from it.
type sideKey struct {
	peer int
	recv bool
}

// sideStream returns the communicator's stream for its async sends to peer (or
// receives from it), made on first use (gonccl's own, in the device's primary
// context); 0 if the caller's stream is in another context, where the operation
// stays on the caller's stream.
func (v *Views) sideStream(peer int, recv bool) (driver.Stream, error) {
	e := v.e
	e.devMu.Lock()
	defer e.devMu.Unlock()
	k := sideKey{peer, recv}
	if s, ok := e.devSide[k]; ok {
		return s, nil
	}
	s, err := v.drv.OwnStream(v.dev)
	if err != nil {
		return 0, err
	}
	if ctx, err := v.drv.StreamContext(s); err != nil || ctx != v.ctx {
		_ = v.drv.ReturnStream(s)
		s = 0
	}
	if e.devSide == nil {
		e.devSide = map[sideKey]driver.Stream{}
	}
	e.devSide[k] = s
	return s, nil
}

// takeSideStreams empties the communicator's side streams and returns them (destroy
// or abort). e.devMu held.
func (e *Comm) takeSideStreams() []driver.Stream {
	var out []driver.Stream
	for k, s := range e.devSide {
		if s != 0 {
			out = append(out, s)
		}
		delete(e.devSide, k)
	}
	return out
}

// returnStreams gives side streams back for later communicators, once the scratch's
// Close has seen every rank's work done (what was queued on them has run; they are
// never destroyed).
func returnStreams(streams []driver.Stream) {
	if len(streams) == 0 {
		return
	}
	drv, err := driver.Default() // loaded: the streams came from it
	if err != nil {
		return
	}
	for _, s := range streams {
		_ = drv.ReturnStream(s)
	}
}

// decidedShared returns the communicator's scratch if it has chosen the device path
// (nil if it stages or has not chosen yet).
func (v *Views) decidedShared() (*cuda.Shared, error) {
	e := v.e
	e.devMu.Lock()
	defer e.devMu.Unlock()
	if !e.devDecided || e.devShared == nil {
		return nil, nil
	}
	if v.ctx != e.devCtx {
		return nil, fmt.Errorf("%w: the communicator's device-path operations run in the context of device %d, and this stream belongs to another context: use streams of one device per communicator", errUsage, e.devShared.Device())
	}
	return e.devShared, nil
}

// enqueueP2P enqueues ops, of one communicator and stream, as one group, in issue
// order with the communicator's other operations on the stream (runDevice), each an
// entry of the flight recorder (core/p2ptrace.go).
func enqueueP2P(ops []*deviceP2P) (*core.Request, error) {
	first := ops[0]
	batch := make([]cuda.P2POp, len(ops))
	recs := make([]core.P2PRecord, len(ops))
	for i, d := range ops {
		batch[i], recs[i] = d.op, d.rec
	}
	return first.v.runDevice(first.c, devRecord{root: -1, p2p: recs}, core.Uint8, func([]uintptr) error {
		return p2pNoted(first.c, first.sh, batch)
	})
}

// Group holds the device-path sends and receives of a group (goncclGroupStart/End)
// until its end: see Views.SetP2P. One thread's: not safe for concurrent use.
type Group struct {
	held []*deviceP2P
}

// holdInGroup holds d in the caller's open group, if there is one, and returns the
// request that completes once the group's end has enqueued it.
func holdInGroup(d *deviceP2P) (*core.Request, bool) {
	g := d.v.group
	if g == nil {
		return nil, false
	}
	req, done := core.PendingRequest()
	d.done = done
	g.held = append(g.held, d)
	return req, true
}

// Flush enqueues the group's held operations: at the outermost group end.
func (g *Group) Flush() {
	held := g.held
	g.held = nil
	flushHeld(held)
}

// flushHeld enqueues a group's held device-path operations at its end: one batch per
// communicator and stream, in the order of their first operation. Each operation's
// request completes with its batch.
func flushHeld(held []*deviceP2P) {
	type key struct {
		e *Comm
		s driver.Stream
	}
	var order []key
	batches := map[key][]*deviceP2P{}
	for _, d := range held {
		k := key{d.e, d.op.Stream}
		if batches[k] == nil {
			order = append(order, k)
		}
		batches[k] = append(batches[k], d)
	}
	for _, k := range order {
		b := batches[k]
		req, err := enqueueP2P(b)
		finish := func(err error) {
			for _, d := range b {
				d.done(err)
			}
		}
		if err != nil {
			finish(err)
			continue
		}
		go func() {
			_, err := req.Wait(-1)
			finish(err)
		}()
	}
}

// DeviceAlltoAllv runs an alltoallv on the device path if it applies (ok); counts
// and displacements are in elements of dt, sendLen and recvLen the buffers' extents.
func (v *Views) DeviceAlltoAllv(c *core.Comm, dt core.DataType, send unsafe.Pointer, sendLen uint64, recv unsafe.Pointer, recvLen uint64,
	sc, sd, rc, rd []int) (*core.Request, bool, error) {
	if me := c.Rank(); sc[me] != rc[me] {
		return nil, false, fmt.Errorf("%w: %s: rank %d sends itself %d elements but expects %d (sendcounts[%d] != recvcounts[%d])",
			core.ErrInvalidArgument, core.KindAlltoAllv, me, sc[me], rc[me], me, me)
	}
	if v.stream == 0 {
		return nil, false, nil
	}
	if err := c.CheckOp(core.KindAlltoAllv, dt, nil, noRoot); err != nil {
		return nil, false, err
	}
	bytes := func(a []int) []int {
		out := make([]int, len(a))
		for i, x := range a {
			out[i] = x * dt.Size()
		}
		return out
	}
	// Count 0 in the flight recorder, as core records it: the counts differ per rank.
	return v.tryDevice(c, core.KindAlltoAllv, dt, nil, noRoot, 0, func(sh *cuda.Shared, _ *kernels.Kernels, p []uintptr) error {
		if err := sh.AlltoAllv(v.stream, p[0], bytes(sc), bytes(sd), p[1], bytes(rc), bytes(rd)); err != nil {
			return err
		}
		noteAlltoAllvSizes(c, bytes(sc), bytes(rc))
		return nil
	}, buf{"sendbuff", send, sendLen, true, false}, buf{"recvbuff", recv, recvLen, false, true})
}
