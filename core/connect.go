package core

import (
	"errors"
	"fmt"
	"time"
)

// ConnectAll connects this rank to every peer it has no link to yet: what init defers
// (see peers.go, connections on demand) made now, so the first operation that needs a
// peer does not pay for the connection. It waits for the links up to the
// communicator's timeout and fails naming the peers it could not reach. A peer
// connects back whether or not it calls ConnectAll too.
func (c *Comm) ConnectAll() error {
	if c.peers.ranks == nil { // fixed links given at creation (tests): nothing deferred
		return nil
	}
	deadline := time.Now().Add(c.Timeout())
	var errs []error
	for p := range c.nranks {
		if p == c.rank {
			continue
		}
		if _, err := c.peers.link(p, deadline); err != nil {
			errs = append(errs, &OpError{Rank: c.rank, Op: fmt.Sprintf("connect to rank %d", p), Peer: p, Err: err})
		}
	}
	return errors.Join(errs...)
}

// Connected lists the peers this rank has a link to.
func (c *Comm) Connected() []int { return c.peers.connected() }
