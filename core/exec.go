package core

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gonccl/gonccl/internal/ringplan"
	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
)

// exec is the context one algorithm runs in: the links, the frame header of the
// current operation, its deadline and scratch memory. Its send and recv turn link
// errors into errors that name the peer and say what to check.
type exec struct {
	rank, nranks int
	peers        *peerSet // links, made on demand: see link
	group        []int    // nil, or a subgroup's ranks: peer i is rank group[i] (see sub)
	hdr          transport.Header
	deadline     time.Time
	timeout      time.Duration
	scratch      []byte // receive staging, outside the Go heap, at least chunkBytes
	chunkBytes   int
	inlineMax    int          // the largest frame sent on the op's own goroutine where the link takes it whole (see sendNow)
	breakLinks   func()       // closes every link: called on the first failure of an op
	guard        safego.Guard // starts the op's goroutines (see safety.go)

	// Per peer, reused by every frame so that nothing is allocated per chunk: the
	// header of the frame being sent, of the one being received, and the sink a
	// received frame is reduced through (see recvReduce). One goroutine at a time
	// sends to (or receives from) a peer, as transport.Link requires.
	sendHdrs, recvHdrs []transport.Header
	sinks              []reduceSink

	// zc is what the operation learns for the zero-copy path from the flags its frames
	// carry (zerocopy_learn.go); not learning unless zeroCopy said so.
	zc zcLearning

	errMu sync.Mutex
	err   error // the operation's first error
}

// fail records the operation's first error and closes the links, so that every
// goroutine of the operation (and every peer) stops waiting.
func (e *exec) fail(err error) {
	e.errMu.Lock()
	first := e.err == nil
	if first {
		e.err = err
	}
	e.errMu.Unlock()
	if first {
		e.breakLinks()
	}
}

// result returns the operation's first error.
func (e *exec) result() error {
	e.errMu.Lock()
	defer e.errMu.Unlock()
	return e.err
}

// link returns the link to peer, connecting it first if this is the first use.
func (e *exec) link(peer int) (transport.Link, error) {
	l, err := e.peers.link(e.realRank(peer), e.deadline)
	if err != nil {
		return nil, &linkSetupError{err}
	}
	return l, nil
}

// realRank maps a peer of a subgroup's exec to its rank in the communicator.
func (e *exec) realRank(peer int) int {
	if e.group != nil {
		return e.group[peer]
	}
	return peer
}

// linkSetupError is a failure to make a link on demand; its message names the peer
// already (see peerSet.connect), so linkErr passes it through.
type linkSetupError struct{ err error }

func (e *linkSetupError) Error() string { return e.err.Error() }
func (e *linkSetupError) Unwrap() error { return e.err }

func (e *exec) linkSend(peer int, h *transport.Header, p []byte) error {
	l, err := e.link(peer)
	if err != nil {
		return err
	}
	h.Flags = e.zcFlags()
	return l.Send(h, p, e.deadline)
}

func (e *exec) linkRecv(peer int, h *transport.Header, p []byte) error {
	l, err := e.link(peer)
	if err != nil {
		return err
	}
	if err := l.Recv(h, p, e.deadline); err != nil {
		return err
	}
	e.zcHeard(h.Flags)
	return nil
}

// sendKept is send for p that stays unchanged until the operation ends: a link that
// keeps what it sent for resends (between hosts) keeps p by reference instead of a
// copy, until the operation settles (see peerSet.settle).
func (e *exec) sendKept(peer int, off int, p []byte) error {
	l, err := e.link(peer)
	if err != nil {
		return e.linkErr(peer, err)
	}
	k, ok := l.(transport.Keeper)
	if !ok {
		return e.send(peer, off, p)
	}
	h := &e.sendHdrs[peer]
	*h = e.hdr
	h.Offset = uint64(off)
	h.Flags = e.zcFlags()
	e.peers.noteKept(e.realRank(peer))
	if err := k.SendKept(h, p, e.deadline); err != nil {
		return e.linkErr(peer, err)
	}
	return nil
}

// send sends p to peer in one frame of the operation, at byte offset off.
func (e *exec) send(peer int, off int, p []byte) error {
	return e.sendCount(peer, e.hdr.Count, off, p)
}

// recv receives p from peer: one frame of the operation, at byte offset off.
func (e *exec) recv(peer int, off int, p []byte) error {
	return e.recvCount(peer, e.hdr.Count, off, p)
}

// sendCount is send with count in the frame's header instead of the operation's (one
// pair's count in alltoallv).
func (e *exec) sendCount(peer int, count uint64, off int, p []byte) error {
	h := &e.sendHdrs[peer]
	*h = e.hdr
	h.Count, h.Offset = count, uint64(off)
	if err := e.linkSend(peer, h, p); err != nil {
		return e.linkErr(peer, err)
	}
	return nil
}

// recvCount is recv expecting count in the frame's header.
func (e *exec) recvCount(peer int, count uint64, off int, p []byte) error {
	h := &e.recvHdrs[peer]
	*h = e.hdr
	h.Count, h.Offset = count, uint64(off)
	if err := e.linkRecv(peer, h, p); err != nil {
		return e.linkErr(peer, err)
	}
	return nil
}

// recvReduce receives len(dst) bytes from peer and reduces them into dst
// (dst = dst op received). Over a link that hands out its payload in place (shared
// memory) the reduction reads the peer's bytes where they lie; otherwise they pass
// through scratch memory.
func (e *exec) recvReduce(peer int, off int, dst []byte, dt DataType, op RedOp) error {
	l, err := e.link(peer)
	if err != nil {
		return e.linkErr(peer, err)
	}
	if pr, ok := l.(transport.PieceReceiver); ok {
		h := &e.recvHdrs[peer]
		*h = e.hdr
		h.Offset = uint64(off)
		sink := &e.sinks[peer]
		*sink = reduceSink{dst: dst, dt: dt, op: op}
		err := pr.RecvPieces(h, len(dst), dt.Size(), e.deadline, sink)
		*sink = reduceSink{}
		if err != nil {
			return e.linkErr(peer, err)
		}
		e.zcHeard(h.Flags)
		return nil
	}
	if len(dst) > len(e.scratch) {
		return fmt.Errorf("internal error: a reduced frame of %d bytes exceeds the %d bytes of scratch memory", len(dst), len(e.scratch))
	}
	tmp := e.scratch[:len(dst)]
	if err := e.recv(peer, off, tmp); err != nil {
		return err
	}
	return ReduceInto(dst, tmp, dt, op)
}

// reduceSink reduces a frame handed out in place into dst: dst op= piece.
type reduceSink struct {
	dst []byte
	dt  DataType
	op  RedOp
}

func (s *reduceSink) Piece(off int, piece []byte) error {
	return ReduceInto(s.dst[off:off+len(piece)], piece, s.dt, s.op)
}

func (e *exec) linkErr(peer int, err error) error {
	peer = e.realRank(peer)
	var m *transport.MismatchError
	var se *linkSetupError
	switch {
	case errors.As(err, &se):
		return se.err
	case errors.As(err, &m):
		return fmt.Errorf("%w: %s", ErrMismatch, mismatchText(e.rank, m))
	case errors.Is(err, ErrTimeout):
		return &timeoutError{after: e.timeout, waiting: fmt.Sprintf("waiting for rank %d", peer),
			hint: fmt.Sprintf("is rank %d alive, and calling the same collective?", peer)}
	default:
		return lostRankError(peer, err)
	}
}

// sendNow sends p to peer (one frame of the operation, at byte offset off) on the
// calling goroutine if it is at most inlineMax bytes and the link takes the whole frame
// without waiting (transport.ImmediateSender: a shared-memory ring with room), and
// reports whether it did. A caller that sends and receives at once then needs no
// goroutine to send: on a host with more ranks than cores, starting one per step and
// handing the processor between its thread and the caller's cost 256 ranks on 2 cores
// more than the steps' work (a third of the context switches of a small all_reduce).
func (e *exec) sendNow(peer int, off int, p []byte) (bool, error) {
	if len(p) > e.inlineMax {
		return false, nil
	}
	l, err := e.link(peer)
	if err != nil {
		return false, nil // the ordinary send reports it
	}
	t, ok := l.(transport.ImmediateSender)
	if !ok {
		return false, nil
	}
	h := &e.sendHdrs[peer]
	*h = e.hdr
	h.Offset = uint64(off)
	h.Flags = e.zcFlags()
	sent, err := t.TrySend(h, p)
	if err != nil {
		return false, e.linkErr(peer, err)
	}
	return sent, nil
}

// inlineSendMax is the largest frame an operation sends on its own goroutine where
// the link takes it whole (exec.sendNow). On a host whose ranks outnumber its cores,
// any frame: there is no core to run a sending goroutine beside the receiving one, so
// it only adds a hand-over of the processor per step. Otherwise small frames only:
// a larger one is sent by a goroutine on another core while this one receives and
// reduces, the two copies overlapping.
func inlineSendMax(crowded bool) int {
	if crowded {
		return math.MaxInt
	}
	return 64 << 10
}

// sendRecv sends sp to one peer while receiving rp from another (or the same) peer.
func (e *exec) sendRecv(to int, sp []byte, from int, rp []byte) error {
	if sent, err := e.sendNow(to, 0, sp); err != nil || sent {
		if err == nil {
			err = e.recv(from, 0, rp)
		}
		if err != nil {
			e.fail(err)
		}
		return e.result()
	}
	var wg sync.WaitGroup
	defer e.joinOnPanic(nil, &wg)
	e.guard.Go("sendrecv sender", &wg, e.fail, func() {
		if err := e.send(to, 0, sp); err != nil {
			e.fail(err)
		}
	})
	if err := e.recv(from, 0, rp); err != nil {
		e.fail(err)
	}
	wg.Wait()
	return e.result()
}

// joinOnPanic is deferred by an algorithm that starts goroutines of its own: if the
// algorithm panics, it fails the operation (closing the links, so the goroutines'
// sends and receives return), stops and waits for them, and only then lets the panic
// go on to the executor's guard, so that no goroutine of a failed operation touches
// its buffers after the caller has been told it failed.
func (e *exec) joinOnPanic(stop func(), wg *sync.WaitGroup) {
	r := recover()
	if r == nil {
		return
	}
	e.fail(fmt.Errorf("%w: panic: %v", safego.ErrPanic, r))
	if stop != nil {
		stop()
	}
	wg.Wait()
	panic(r)
}

// split returns the bounds [lo, hi) of part i when n items are cut into parts near-equal
// parts.
func split(n, parts, i int) (lo, hi int) { return ringplan.Split(n, parts, i) }

func ceilDiv(a, b int) int { return ringplan.CeilDiv(a, b) }

func mod(a, n int) int { return ringplan.Mod(a, n) }
