package core

import (
	"errors"
	"fmt"

	"github.com/gonccl/gonccl/transport"
)

// A lost rank (its process died: its point-to-point connection ended without a
// goodbye; or it fell silent past the heartbeat timeout) breaks the whole
// communicator at once, as in NCCL: no collective can complete without it. Every link
// is failed, so that the operation running now returns at once whichever peer it is
// waiting on, instead of when the failure has travelled round the ring from neighbour
// to neighbour (each hop a failGrace later). The operation fails with the loss as its
// cause, and so does every later one. This is what makes a survivor see a SIGKILLed
// rank within milliseconds, the first step of recovering by shrink.

// peerLost records that rank is gone (err says how) and breaks the communicator with
// the loss (breakWith, which fails every link), unless it was already broken.
func (c *Comm) peerLost(rank int, err error) {
	lost := fmt.Errorf("lost rank %d: %w", rank, err)
	c.mu.Lock()
	first := c.lost == nil
	if first {
		c.lost = lost
	}
	c.mu.Unlock()
	if first {
		c.breakWith("peer", lost)
	}
}

// isDeath reports whether err, which ended the point-to-point channel to a peer, means
// the peer is gone (rather than that it closed its communicator and said so).
func isDeath(err error) bool {
	var left *peerLeftError
	return errors.Is(err, transport.ErrPeerClosed) && !errors.As(err, &left)
}
