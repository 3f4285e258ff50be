package core

import (
	"errors"
	"net"
	"sync"
	"time"
)

// What a rank's listener spends on connections that have not proven themselves: anyone
// who can reach the port can open them, so their number is bounded, the oldest gives
// way to a newcomer, and an accept that fails (out of descriptors: EMFILE) is retried
// after a pause instead of ending the listener. Buffers worth a link (4 MiB) are set
// only once a connection has proven the secret (tcp.Accept).

// maxHandshakes bounds the connections a rank authenticates at once.
const maxHandshakes = 64

// handshakeGrace is how long an unauthenticated connection that has sent nothing yet
// is left to prove itself before a newcomer may take its place when all
// maxHandshakes are taken: a real rank sends its hello as soon as it connects, a
// stranger holding connections open never does.
const handshakeGrace = 250 * time.Millisecond

// slowGrace is how long one that has sent something is left before a newcomer may take
// its place: a real rank's handshake is a few round trips, but on a starved host its
// acceptor may not have read them yet.
const slowGrace = 2 * time.Second

// spokeBytes is what a connection must have sent to count as talking: the start of a
// hello, or a TLS preamble.
const spokeBytes = 16

// gate counts the connections being authenticated, oldest first.
type gate struct {
	mu      sync.Mutex
	max     int
	grace   time.Duration
	slow    time.Duration
	spoke   func(c net.Conn) bool // whether c has sent spokeBytes
	pending []admitted
	dropped int       // connections dropped to make room (or refused) since the last report
	told    time.Time // the last report
}

type admitted struct {
	c     net.Conn
	since time.Time
}

// admit files c as being authenticated at now. When max are already, one gives way:
// the oldest that has sent nothing in grace, else the oldest that has not proven
// itself in slow (returned: the caller closes it); if none may, c itself is refused
// (ok false: the caller closes c).
func (g *gate) admit(c net.Conn, now time.Time) (evicted net.Conn, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) >= g.max {
		i := g.victim(now)
		g.dropped++
		if i < 0 {
			return nil, false
		}
		evicted = g.pending[i].c
		g.pending = append(g.pending[:i], g.pending[i+1:]...)
	}
	g.pending = append(g.pending, admitted{c, now})
	return evicted, true
}

// victim is the index of the pending connection that gives way to a newcomer, or -1.
func (g *gate) victim(now time.Time) int {
	for i, a := range g.pending {
		if now.Sub(a.since) >= g.grace && !g.spoke(a.c) {
			return i
		}
	}
	if len(g.pending) > 0 && now.Sub(g.pending[0].since) >= g.slow {
		return 0
	}
	return -1
}

// done takes c off the list (authenticated or failed); false: it was dropped to make
// room already.
func (g *gate) done(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, a := range g.pending {
		if a.c == c {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			return true
		}
	}
	return false
}

// report returns how many connections were dropped to make room since the last
// report, at most once per every: a flood is told in one line, not one per connection.
func (g *gate) report(now time.Time, every time.Duration) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dropped == 0 || now.Sub(g.told) < every {
		return 0
	}
	n := g.dropped
	g.dropped, g.told = 0, now
	return n
}

// acceptPause is how long a listener waits after Accept failed with err before it
// tries again (pause: the previous pause, 0 after a success), or false where the
// listener is closed and accepting is over. Out of descriptors (EMFILE, ENFILE) or
// memory, an aborted connection: each passes, and connections queue in the backlog
// meanwhile.
func acceptPause(err error, pause time.Duration) (time.Duration, bool) {
	if errors.Is(err, net.ErrClosed) {
		return 0, false
	}
	return min(max(2*pause, firstAcceptPause), 200*time.Millisecond), true
}

// firstAcceptPause is the pause after the first of a run of failed accepts.
const firstAcceptPause = 5 * time.Millisecond
