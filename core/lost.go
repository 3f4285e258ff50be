package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// A lost rank (its process died: its point-to-point connection ended without a
// goodbye; or it fell silent past the heartbeat timeout) breaks the whole
// communicator, as in NCCL: no collective can complete without it. A silent rank
// breaks it at once; a dead one failGrace later (peerGone), since the frames it sent
// before dying may still be on their way in and complete the operation running now,
// or as soon as an operation fails anyway (lossFailedOp), whichever comes first.
// Every link is failed, so that the operation running now returns whichever peer it
// is waiting on, instead of when the failure has travelled round the ring from
// neighbour to neighbour (each hop a failGrace later). The operation fails with the
// loss as its cause, and so does every later one. This is what makes a survivor see a
// SIGKILLed rank within a fraction of a second, the first step of recovering by shrink.
//
// Connections are made on demand (peers.go), so some survivors never had one to the
// lost rank and cannot see it go. The rank that records a loss first tells every peer
// it has a channel to (MsgLost, with the cause and whether to break at once), and each
// peer that learns it first passes it on in turn: the news floods the channels, which
// connect every survivor (ring neighbours always have one), and every survivor names
// the lost rank, not the neighbour whose failure reached it first.
//
// The news can be slower than the failure it explains. A rank that breaks its
// communicator fails its links at once (and closes them failGrace later), whether it
// knows the cause yet or not, so a peer may see a link end (closed, or a reconnect
// refused: the rank gave that link up) before the news arrives on the channel beside
// it; on a crowded host the reader of that channel may not run for a while. An
// operation that fails on such a link waits for the cause (awaitCause), up to
// causeWait: a loss recorded meanwhile (the peer's news, or this rank's own channel
// to the rank finding it dead), a failure a peer reported, or the channel to the rank
// ending (a goodbye, or death). Only a link that proves its peer gone (a reconnect
// that gave up: gaveUp) records the loss at once, and so starts the news.

// peerLost records that rank fell silent (err says how) and breaks the communicator
// with the loss at once (breakWith, which fails every link), unless a loss was
// recorded already.
func (c *Comm) peerLost(rank int, err error) { c.lose(rank, err, true) }

// peerGone handles a rank whose connections ended without a goodbye. What it sent
// before it died may still be buffered here, and the operation reading it may yet
// complete: its link is left to drain and then fail on its own (at the end of its
// data). The loss is recorded at once, so that every failure names it, and the rest of
// the communicator is broken failGrace later, for the operations that wait on other
// ranks.
func (c *Comm) peerGone(rank int, err error) { c.lose(rank, err, false) }

// lossReported handles a peer's news (MsgLost) that rank is lost: from saw it, reason
// says how, now whether to break at once or failGrace later (as from does), and silent
// whether the rank fell silent (the heartbeat found it) rather than died. A silent
// rank's channel is failed here too, first: this rank may still hear from it (a
// network cut between two others, a test that stops only its heartbeats), but the
// communicator has given it up, and a diagnosis must say so.
func (c *Comm) lossReported(rank, from int, reason string, now, silent bool) {
	if rank == c.rank { // a peer thinks this rank is gone: it hangs up, and that ends it
		c.logs.net.Warn(fmt.Sprintf("rank %d reports this rank lost: %s", from, reason))
		return
	}
	err := &lossReport{from: from, reason: reason, silent: silent}
	if silent && c.p2p != nil {
		c.p2p.failRank(rank, err)
	}
	c.lose(rank, err, now)
}

// lossReport is a loss a peer reported; it matches ErrTimeout where the lost rank fell
// silent (as the peer's own error did).
type lossReport struct {
	from   int
	reason string
	silent bool
}

func (e *lossReport) Error() string { return fmt.Sprintf("rank %d reports: %s", e.from, e.reason) }

func (e *lossReport) Unwrap() error {
	if e.silent {
		return ErrTimeout
	}
	return transport.ErrPeerClosed
}

// lose records the loss of rank (err says how), unless a loss is recorded already, and
// breaks the communicator: at once (now), or failGrace later for a rank that died
// (see peerGone). The peers are told (MsgLost) when the loss is first recorded, and
// again when a wait of failGrace turns into breaking at once.
func (c *Comm) lose(rank int, err error, now bool) {
	c.mu.Lock()
	first := c.lost == nil
	if first {
		c.lost, c.lostRank, c.lostCause = lostRankError(rank, err), rank, err
		c.heardLocked()
	}
	lost, rank, cause := c.lost, c.lostRank, c.lostCause
	hurry := now && !c.lostNow
	if hurry {
		c.lostNow = true
	}
	c.mu.Unlock()
	if !first && !hurry {
		return
	}
	if c.p2p != nil {
		c.p2p.tellLost(rank, cause.Error(), now, errors.Is(cause, ErrTimeout))
	}
	if now {
		c.breakWith("peer", lost)
		return
	}
	brk := func() { c.breakWith("peer", lost) }
	time.AfterFunc(failGrace, c.guard.Func("lost rank break", func(err error) { c.breakWith("lost rank break", err) }, brk))
}

// lossFailedOp is called when an operation failed while a loss was recorded but the
// communicator not yet broken (a dead rank's grace, see peerGone): the wait is over,
// since the operation it was for has failed all the same, and the communicator breaks
// now, here and (told again) on every peer, instead of each peer waiting out its grace
// on a neighbour that will never send.
func (c *Comm) lossFailedOp() {
	c.mu.Lock()
	rank, cause := c.lostRank, c.lostCause
	c.mu.Unlock()
	if cause != nil {
		c.lose(rank, cause, true)
	}
}

// causeWait bounds how long an operation that failed on a link a peer closed waits
// for the cause (see awaitCause). The news left the peer before, or as, its links
// closed, so it is late only by the scheduling of a crowded host: with 32 ranks on 2
// cores, a channel's reader waited up to a few hundred milliseconds for a core.
const causeWait = time.Second

// awaitCause waits, for an operation that failed with err, until this rank knows why
// (see above), up to causeWait, where err is a link to a peer that ended without
// proving the peer gone and no loss is recorded yet. Where err proves the peer gone
// (gaveUp), the loss is recorded at once instead. The caller then names the loss
// recorded, if any (c.lost).
func (c *Comm) awaitCause(err error) {
	var lr *lostRank
	if c.p2p == nil || !errors.As(err, &lr) || errors.Is(err, ErrTimeout) {
		return
	}
	if gaveUp(lr.err) {
		c.lose(lr.rank, lr.err, true)
		return
	}
	t := time.NewTimer(causeWait)
	defer t.Stop()
	for {
		c.mu.Lock()
		_, reported := c.broken.(*failureReport)
		known := c.lost != nil || c.aborted || reported || len(c.refusals) > 0
		if c.news == nil {
			c.news = make(chan struct{})
		}
		news := c.news
		c.mu.Unlock()
		if known || c.p2p.ended(lr.rank) {
			return
		}
		select {
		case <-news:
		case <-t.C:
			return
		}
	}
}

// heardLocked wakes awaitCause: a loss was recorded, a peer reported a failure, or a
// point-to-point channel ended. c.mu held.
func (c *Comm) heardLocked() {
	if c.news != nil {
		close(c.news)
		c.news = nil
	}
}

// heard is heardLocked for callers without c.mu.
func (c *Comm) heard() {
	c.mu.Lock()
	c.heardLocked()
	c.mu.Unlock()
}

// isDeath reports whether err, which ended the point-to-point channel to a peer, means
// the peer is gone (rather than that it closed its communicator and said so).
func isDeath(err error) bool {
	var left *peerLeftError
	return errors.Is(err, transport.ErrPeerClosed) && !errors.As(err, &left)
}
