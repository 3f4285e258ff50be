package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// Heartbeats find a peer that went silent without closing anything: a hung or stopped
// process, a host whose network link was cut. Every rank writes a heartbeat frame on
// the point-to-point channel to each peer it has not written to for an interval, and
// declares a peer gone when nothing at all (heartbeat or data) has arrived from it for
// the heartbeat timeout (GONCCL_HEARTBEAT_TIMEOUT_MS). The point-to-point channel is
// read by its own goroutine whatever the rank is doing (long compute included), so
// silence means the process or the network is gone. Declaring a peer gone fails the
// channel and closes the collective link to it, so a collective waiting on it fails at
// once, naming it, instead of at the operation's timeout.

// Silence is not always a lost peer: a TCP connection that broke is being made again
// (GONCCL_LINK_RETRY_MS, see sessions.go), and while it is, the heartbeat leaves the
// verdict to the reconnect's window, which fails the link naming the peer if it does
// not come back. With the window below the heartbeat timeout (the default) that
// changes nothing; above it, a network that goes silent for longer is survived.

// reconnecting reports whether a TCP connection to rank is down and being made again.
func (e *p2pEngine) reconnecting(rank int) (bool, time.Time) {
	if e.linkDown == nil {
		return false, time.Time{}
	}
	return e.linkDown(rank)
}

// heartbeatInterval is how often heartbeats go out for a given timeout.
func heartbeatInterval(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 50*time.Millisecond), time.Second)
}

// heartbeat sends heartbeats and watches for silent peers until close. paused (a test
// hook, nil in production) stops this rank's heartbeats while it returns true.
func (e *p2pEngine) heartbeat(interval, timeout time.Duration, paused func(rank int) bool) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-tick.C:
		}
		now := time.Now()
		silent := paused != nil && paused(e.rank)
		var dead []*p2pPeer
		e.mu.Lock()
		for _, pp := range e.peers {
			if pp == nil || pp.err != nil {
				continue
			}
			if now.Sub(pp.conn.LastActivity()) > timeout {
				if down, since := e.reconnecting(pp.rank); down && now.Sub(since) < e.linkRetry {
					continue // link down, retrying: the reconnect's window decides (sessions.go)
				}
				dead = append(dead, pp)
				continue
			}
			idle := now.Sub(time.Unix(0, pp.lastSent.Load())) >= interval
			if idle && !silent && len(pp.ctrl) == 0 && len(pp.data) == 0 {
				e.enqueue(pp, &p2pFrame{h: transport.MsgHeader{Kind: transport.MsgHeartbeat}, deadline: now.Add(timeout)}, true)
			}
		}
		e.mu.Unlock()
		for _, pp := range dead {
			err := fmt.Errorf("%w: nothing heard from rank %d for %v (missed heartbeats; GONCCL_HEARTBEAT_TIMEOUT_MS): is it hung or stopped, or is the network to it down?",
				ErrTimeout, pp.rank, timeout.Round(time.Millisecond))
			e.failPeer(pp, err) // its reader, failing next, leaves the report to us
			if e.onDead != nil {
				e.onDead(pp.rank, err)
			}
		}
	}
}

// peerDead handles a peer that is gone. One that missed its heartbeats: its collective
// link is closed and the communicator broken at once (see lost.go), so that the
// operation running now fails. One whose connection ended without a goodbye: see
// peerGone (what it sent before dying may still complete the operation running now).
func (c *Comm) peerDead(rank int, err error) {
	if !errors.Is(err, ErrTimeout) && c.idle() {
		// Nothing waits on the peer: this is how a rank that ends its process without
		// destroying its group looks (a script's normal end), not yet a failure. An
		// operation issued later fails naming the rank.
		c.logs.net.Info(fmt.Sprintf("rank %d closed its connection with no operation pending "+
			"(its process ended without destroying the group, or died): %v", rank, err))
	} else {
		c.logs.net.Warn(err.Error())
	}
	if !errors.Is(err, ErrTimeout) { // its connection ended: see peerGone
		c.peerGone(rank, err)
		return
	}
	c.peers.closeLink(rank)
	c.peerLost(rank, err)
}
