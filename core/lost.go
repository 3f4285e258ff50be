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
// before dying may still be on their way in and complete the operation running now.
// Every link is failed, so that the operation running now returns whichever peer it
// is waiting on, instead of when the failure has travelled round the ring from
// neighbour to neighbour (each hop a failGrace later). The operation fails with the
// loss as its cause, and so does every later one. This is what makes a survivor see a
// SIGKILLed rank within a fraction of a second, the first step of recovering by shrink.

// peerLost records that rank is gone (err says how) and breaks the communicator with
// the loss (breakWith, which fails every link), unless it was already broken.
func (c *Comm) peerLost(rank int, err error) {
	if lost, first := c.recordLost(rank, err); first {
		c.breakWith("peer", lost)
	}
}

// peerGone handles a rank whose connections ended without a goodbye. What it sent
// before it died may still be buffered here, and the operation reading it may yet
// complete: its link is left to drain and then fail on its own (at the end of its
// data). The loss is recorded at once, so that every failure names it, and the rest of
// the communicator is broken failGrace later, for the operations that wait on other
// ranks.
func (c *Comm) peerGone(rank int, err error) {
	lost, first := c.recordLost(rank, err)
	if first {
		time.AfterFunc(failGrace, c.guard.Func("lost rank break", nil, func() { c.breakWith("peer", lost) }))
	}
}

// recordLost records the loss of rank, unless one is recorded already; it returns the
// loss and whether it was the first.
func (c *Comm) recordLost(rank int, err error) (error, bool) {
	lost := fmt.Errorf("lost rank %d: %w", rank, err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lost != nil {
		return c.lost, false
	}
	c.lost = lost
	return lost, true
}

// isDeath reports whether err, which ended the point-to-point channel to a peer, means
// the peer is gone (rather than that it closed its communicator and said so).
func isDeath(err error) bool {
	var left *peerLeftError
	return errors.Is(err, transport.ErrPeerClosed) && !errors.As(err, &left)
}
