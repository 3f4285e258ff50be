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

// handshakeGrace is how long an unauthenticated connection is left to prove itself
// before a newcomer may take its place when all maxHandshakes are taken: a real
// rank's handshake takes a few round trips, a held connection of a stranger forever.
const handshakeGrace = 250 * time.Millisecond

// gate counts the connections being authenticated, oldest first.
type gate struct {
	mu      sync.Mutex
	max     int
	grace   time.Duration
	pending []admitted
	dropped int       // connections dropped to make room (or refused) since the last report
	told    time.Time // the last report
}

type admitted struct {
	c     net.Conn
	since time.Time
}

// admit files c as being authenticated at now. When max are already, the oldest gives
// way if it has had grace to prove itself (returned: the caller closes it); otherwise
// c itself is refused (ok false: the caller closes c).
func (g *gate) admit(c net.Conn, now time.Time) (evicted net.Conn, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.pending) >= g.max {
		if now.Sub(g.pending[0].since) < g.grace {
			g.dropped++
			return nil, false
		}
		evicted = g.pending[0].c
		g.pending = g.pending[1:]
		g.dropped++
	}
	g.pending = append(g.pending, admitted{c, now})
	return evicted, true
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
