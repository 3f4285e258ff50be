package core

import (
	"fmt"
	"strings"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// A rank whose collective fails a check of its own arguments before the call (a
// binding's check of the tensors it was handed, say) never makes the call, and its
// peers, which did, would wait for it until the timeout, or until its process exits and
// they see only a lost rank. So the rank refuses the call instead (Refuse): it uses up
// the sequence number the call would have taken and tells every peer it has a channel
// to (MsgRefused: the number, the kind, why), as rank 0 tells every rank why init
// cannot start. A peer's operation of that number then fails with
//
//	all_gather #3 (float32 x 4 per rank): rank 1 refused all_gather #3: <its reason>
//
// and the peer's communicator breaks, as after any failed collective. Ranks that all
// refuse the same call (the same bad tensor everywhere) stay in step, and their
// communicator stays usable: each used up the number, and each drops the others' word
// of a number it refused too. A word can come before this rank reaches the number, so
// it waits in refusals until this rank either refuses the number too or runs an
// operation of it (which then fails at once).

// maxRefusals bounds the words of peers' refusals held for numbers this rank has not
// reached, and the numbers this rank refused that it remembers: a peer is never far
// ahead (every collective but a refused one needs this rank), so the bound is only
// reached by a peer that refuses call after call while this rank does not call.
const maxRefusals = 1024

// refusalError is a peer's refusal of collective number seq.
type refusalError struct {
	rank   int
	kind   Kind
	seq    uint64
	reason string
}

func (e *refusalError) Error() string {
	return fmt.Sprintf("rank %d refused %s #%d: %s", e.rank, e.kind, e.seq, e.reason)
}

// Unwrap returns ErrMismatch: one rank made the call and another did not (the C ABI
// returns goncclMismatch).
func (e *refusalError) Unwrap() error { return ErrMismatch }

// Refuse tells the peers that this rank will not make its next collective, of kind,
// because a check of its arguments failed before the call (reason says which; a
// leading "gonccl: " is dropped, as the peers' errors start with gonccl already). It uses
// up the sequence number the call would have taken and waits until the word is written
// to every peer's channel, at most statusWait: best effort, so it fails only on a
// communicator that is closed or an unknown kind; a rank with no channel to a peer
// cannot tell it.
func (c *Comm) Refuse(kind Kind, reason string) error {
	if kind.row() == nil {
		return invalidf("refuse: %d is not a collective's kind", uint8(kind))
	}
	// The peers' errors say "gonccl" once, at their start.
	reason = strings.TrimPrefix(reason, "gonccl: ")
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("gonccl rank %d: refuse %s: %w", c.rank, kind, ErrClosed)
	}
	c.seq++
	seq := c.seq
	o := op{kind: kind, seq: seq, root: -1}
	what := fmt.Sprintf("%s #%d", kind, seq) // its sizes are what was refused
	c.issuedOp = fmt.Sprintf("%s, refused here: %s", what, truncate(reason, 256))
	c.trace.enqueued(&o)
	if c.ownRefused == nil {
		c.ownRefused = map[uint64]bool{}
	}
	c.ownRefused[seq] = true
	delete(c.refusals, seq)
	if len(c.ownRefused) > maxRefusals {
		for s := range c.ownRefused {
			if s+maxRefusals < seq {
				delete(c.ownRefused, s)
			}
		}
	}
	if c.running == nil && c.finishedSeq == seq-1 {
		c.finishedSeq = seq // nothing ahead of it: it is over
	}
	c.mu.Unlock()
	c.trace.refused(seq, reason)
	c.logs.coll.Warn(fmt.Sprintf("%s: refused here, peers told: %s", what, reason))
	if c.p2p != nil {
		c.p2p.tellRefused(kind, seq, reason)
	}
	return nil
}

// skipRefusedLocked moves finishedSeq past the numbers this rank refused that follow
// it (refused calls finish when the operations before them have). c.mu held.
func (c *Comm) skipRefusedLocked() {
	for c.ownRefused[c.finishedSeq+1] && c.finishedSeq < c.seq {
		c.finishedSeq++
	}
}

// refusalReported handles a peer's word (MsgRefused) that rank from refused collective
// number seq, of kind, for reason. Dropped if this rank refused seq too; held if this
// rank has not reached seq; otherwise the operation of that number fails with it: at
// once if it runs now (its links are failed, so it stops waiting), when it starts if
// it is queued, and if it has finished already (a broadcast's root, whose sends did not
// need the refusing rank) the communicator breaks with it, since the ranks are out of
// step.
func (c *Comm) refusalReported(from int, kind Kind, seq uint64, reason string) {
	err := &refusalError{rank: from, kind: kind, seq: seq, reason: reason}
	c.mu.Lock()
	switch {
	case c.ownRefused[seq]:
		c.mu.Unlock()
		return
	case c.refusals[seq] != nil:
		c.mu.Unlock()
		return // another peer's word came first
	case seq > c.finishedSeq:
		if len(c.refusals) >= maxRefusals {
			c.mu.Unlock()
			c.logs.coll.Warn(fmt.Sprintf("%v (not held: %d refusals already wait for calls this rank has not made)", err, maxRefusals))
			return
		}
		if c.refusals == nil {
			c.refusals = map[uint64]*refusalError{}
		}
		c.refusals[seq] = err
		c.heardLocked() // a failure waiting for its cause (awaitCause) has it
		running := c.running != nil && c.running.seq == seq
		c.mu.Unlock()
		c.logs.coll.Warn(err.Error())
		if running {
			c.failLinks()
		}
	default:
		c.mu.Unlock()
		c.logs.coll.Warn(fmt.Sprintf("%v (this rank had finished its #%d)", err, seq))
		c.breakWith("peer", err)
	}
}

// takeRefusal returns (and forgets) a peer's refusal of number seq, or nil. c.mu held.
func (c *Comm) takeRefusalLocked(seq uint64) *refusalError {
	r := c.refusals[seq]
	if r != nil {
		delete(c.refusals, seq)
	}
	return r
}

// tellRefused tells every live peer that this rank refused collective number seq, of
// kind, and why, and waits until the words are written, at most statusWait, so that
// they go out even if this process ends right after.
func (e *p2pEngine) tellRefused(kind Kind, seq uint64, reason string) {
	e.tellEveryPeer(transport.MsgHeader{Kind: transport.MsgRefused, Tag: int64(kind), Seq: seq}, reason, statusWait, false)
}

// readRefused reads a peer's refusal and hands it to onRefused.
func (e *p2pEngine) readRefused(pp *p2pPeer, h transport.MsgHeader) error {
	reason, err := e.readNote(pp, h, "a refusal")
	if err != nil {
		return err
	}
	kind := Kind(h.Tag)
	if h.Tag < 0 || h.Tag > 255 || kind.row() == nil || h.Seq == 0 {
		return fmt.Errorf("rank %d sent a refusal of collective #%d of kind %d: not a collective", pp.rank, h.Seq, h.Tag)
	}
	if e.onRefused != nil {
		e.onRefused(pp.rank, kind, h.Seq, reason)
	}
	return nil
}

// refused records that this rank refused seq (Comm.Refuse), saying why. It is not a
// failure of the communicator, whose first dump it leaves to a real one, nor an
// operation a rank can be stuck in: python -m gonccl.trace takes it as done.
func (f *flightRecorder) refused(seq uint64, reason string) {
	if f == nil {
		return
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	if s := f.slot(seq); s != nil {
		s.state, s.started, s.finished, s.err = TraceRefused, now, now, "refused here: "+reason
	}
	f.mu.Unlock()
}
