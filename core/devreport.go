package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// Some failures are seen by one rank only, though every rank shares them: on the
// device path (package cuda, devfault.go) a rank's watcher names ranks that called
// different operations, or an operation past the timeout, from the descriptors and
// flags in its own header. Once it gives up it releases its streams, and its peers'
// headers then change under their watchers, which may never see what it saw (they
// would end at the timeout, naming the wrong thing, if at all). So the rank whose
// communicator fails that way tells every peer it has a channel to (MsgFailed: the
// message, and its class: a mismatch or a timeout), as a lost rank is told (lost.go),
// and each peer that takes the news as its own cause passes it on in turn: the news
// floods the channels, and every rank breaks its communicator with "rank N reports:
// <N's message>", an error of the same class (ErrMismatch: the C ABI returns
// goncclMismatch, Python raises the mismatch error). Its watcher finds the
// communicator broken (WatchConfig.Err) and releases its streams.
//
// The first cause wins, but a mismatch is the root of the timeouts it causes: a
// mismatch, this rank's own or reported, replaces a peer's report of anything else,
// and is passed on too. So every rank ends naming the mismatch, and a rank changes
// its cause at most twice, which bounds the flood.

// Classes of a reported failure (MsgFailed's Seq).
const (
	failOther    = iota // neither of the below (the driver failed, for example)
	failMismatch        // the ranks called different operations (ErrMismatch)
	failTimeout         // an operation past the communicator's timeout (ErrTimeout)
	failClasses
)

func failClass(err error) uint64 {
	switch {
	case errors.Is(err, ErrMismatch):
		return failMismatch
	case errors.Is(err, ErrTimeout):
		return failTimeout
	}
	return failOther
}

// failureReport is a failure a peer reported; it matches the sentinel of its class.
type failureReport struct {
	from   int
	reason string
	class  uint64
}

func (e *failureReport) Error() string { return fmt.Sprintf("rank %d reports: %s", e.from, e.reason) }

func (e *failureReport) Unwrap() error {
	switch e.class {
	case failMismatch:
		return ErrMismatch
	case failTimeout:
		return ErrTimeout
	}
	return nil
}

// setCauseLocked records err as what broke the communicator (what says where it came
// from) if nothing has yet, or if a peer's report of something other than a mismatch
// has and err is a mismatch (see above); true if it did. c.mu held.
func (c *Comm) setCauseLocked(what string, err error) bool {
	if c.broken != nil {
		rep, ok := c.broken.(*failureReport)
		if !ok || rep.class == failMismatch || failClass(err) != failMismatch {
			return false
		}
	}
	c.broken = err
	c.brokenText = truncate(fmt.Sprintf("%s: %v", what, err), 1024)
	return true
}

// failureReported handles a peer's news (MsgFailed, passed on by rank by) that rank
// from's communicator failed: reason is from's message, class its class. If it
// becomes this rank's cause, the communicator breaks with it and the peers are told.
func (c *Comm) failureReported(from, by int, reason string, class uint64) {
	if from == c.rank {
		return // its own news, come back round
	}
	err := &failureReport{from: from, reason: reason, class: class}
	c.mu.Lock()
	hurry := c.lost != nil && !c.lostNow && !c.aborted
	changed := c.setCauseLocked("peer", err)
	if changed {
		c.heardLocked()
	}
	c.mu.Unlock()
	if !changed {
		return
	}
	c.logs.net.Warn(fmt.Sprintf("%v (heard from rank %d)", err, by))
	if c.p2p != nil {
		c.p2p.tellFailed(from, by, reason, class)
	}
	if hurry {
		c.lossFailedOp()
	}
	c.failLinks()
}

// tellFailed tells every live peer but from and skip that rank from's communicator
// failed (see above). It does not wait for the frames to go out.
func (e *p2pEngine) tellFailed(from, skip int, reason string, class uint64) {
	b := []byte(truncate(reason, transport.MaxStatusBytes-16))
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed != nil || e.leaving != nil {
		return
	}
	for _, pp := range e.peers {
		if pp == nil || pp.err != nil || pp.rank == from || pp.rank == skip {
			continue
		}
		e.enqueue(pp, &p2pFrame{h: transport.MsgHeader{Kind: transport.MsgFailed, Tag: int64(from), Seq: class, Len: uint64(len(b))},
			payload: b, deadline: time.Now().Add(statusWait)}, true)
	}
}

// readFailed reads a peer's news that a rank's communicator failed and hands it to
// onFailed.
func (e *p2pEngine) readFailed(pp *p2pPeer, h transport.MsgHeader) error {
	if h.Len > transport.MaxStatusBytes {
		return fmt.Errorf("rank %d sent a failure report of %d bytes, above the %d-byte limit", pp.rank, h.Len, transport.MaxStatusBytes)
	}
	b := make([]byte, h.Len)
	if err := pp.conn.ReadPayload(b, time.Now().Add(statusWait)); err != nil {
		return err
	}
	if h.Tag < 0 || h.Tag >= int64(e.nranks) || h.Seq >= failClasses {
		return fmt.Errorf("rank %d sent a failure report of rank %d (class %d): not a rank and class it can report", pp.rank, h.Tag, h.Seq)
	}
	if e.onFailed != nil {
		e.onFailed(int(h.Tag), pp.rank, string(b), h.Seq)
	}
	return nil
}
