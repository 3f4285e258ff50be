package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/internal/safego"
)

// A Session is a net.Conn between two ranks that outlives the TCP connection under it:
// when that connection breaks (reset or aborted by anything between the hosts) while
// both processes live, the session connects again, authenticated as at first, and
// resumes the byte stream where it stopped, with nothing lost, repeated or reordered.
// The links above it (StreamLink, StripedLink, transport.MsgConn) see only a read or
// write that took longer.
//
//	dialler (higher rank)                      acceptor (lower rank)
//	  breaks: redials ─── hello{Resume, link, delivered} ──►  checks link id, counts
//	          ◄────────── resume answer{delivered} ──────────
//	  both: resend from the peer's delivered count, then carry on
//
// Each side counts the bytes it has written into the stream (sent) and handed to its
// reader (delivered), and keeps the last bytes it wrote in a ring (retained). Bytes
// the peer has not yet read are in this host's send buffer, the network or the peer's
// receive buffer (kernel buffers: at most about SO_SNDBUF + the peer's SO_RCVBUF), so
// a ring of that size holds every byte a reconnect can ask for; the ring is filled
// from the tail of each write after the write returns, so a large write costs a copy
// of at most the ring's size, not of the whole write. A reconnect asking for bytes the
// ring no longer holds is refused (ErrCountMismatch): the link fails, it is never
// resumed wrong.
//
// Only the dialler reconnects (as at first: the higher rank of a pair dials); an
// acceptor that sees the break first asks the dialler to, with a call (ChannelCall,
// Resume). A peer whose process has exited refuses the connection at once (no
// listener), and the session fails then and there; one that closed its end on
// purpose sends a FIN, read as the end of the stream (io.EOF), never retried (an
// end-of-file that a reset left behind is told apart by the socket's state). A break
// that does not heal within the retry window fails the session with ErrLinkDown,
// naming the rank.

// Reconnect errors, each matched with errors.Is.
var (
	// ErrLinkDown means a broken connection did not come back within the retry window.
	ErrLinkDown = errors.New("link down past the retry window")
	// ErrPeerGone means the peer's host refused the reconnect: its process has exited.
	ErrPeerGone = errors.New("peer gone: its host refused the reconnect")
	// ErrStaleLink means a reconnect named a link this rank does not have (an old one,
	// or one made up).
	ErrStaleLink = errors.New("stale link id")
	// ErrCountMismatch means a reconnect's delivered count lies outside what the other
	// side sent and still holds.
	ErrCountMismatch = errors.New("delivered byte counts do not match")
)

// SessionConfig says how a Session reconnects.
type SessionConfig struct {
	Peer    int    // the rank at the other end, for messages
	Channel uint8  // the connection's channel, for messages
	Link    uint64 // the session's id (Hello.Link)
	// Retry is how long a broken connection may take to come back.
	Retry time.Duration
	// Redial (the dialler's side) connects again and returns the new connection and
	// the count the acceptor has delivered (see DialResume).
	Redial func(delivered uint64, deadline time.Time) (net.Conn, uint64, error)
	// Call (the acceptor's side) asks the dialler to reconnect generation gen.
	Call func(gen uint64, deadline time.Time) error
	// Ask asks the peer how many bytes of the link it has delivered (AskDelivered),
	// for Linger; nil: a close does not wait.
	Ask func(deadline time.Time) (uint64, error)
	// Log reports breaks and resumes (INFO).
	Log func(msg string)
	// Guard runs the reconnecting goroutine.
	Guard safego.Guard
	// Checksum frames the stream in records with a CRC32C each (checksum.go).
	Checksum bool
}

// Session implements net.Conn over a sequence of connections (see above).
type Session struct {
	cfg      SessionConfig
	peerName string // the peer's TLS certificate ("" over plain TCP): a reconnect must show the same

	mu       sync.Mutex
	idle     *sync.Cond // inflight dropped to zero
	conn     net.Conn   // the current connection
	gen      uint64     // connections installed so far - 1
	down     bool       // the current connection broke; reads and writes wait
	resend   bool       // the new connection is being filled from the ring; writes wait
	since    time.Time  // when it broke
	err      error      // the session failed: every call returns it
	closed   bool
	inflight int           // reads and writes running on conn
	changed  chan struct{} // closed and replaced at every change of the above or a deadline
	rdl, wdl time.Time

	sent, delivered uint64
	unsent          int    // bytes left of a write that broke (the peer may have some)
	skip            uint64 // bytes of that write the peer turned out to have
	ring            ring
	rec             recordReader // Checksum: the record being read
	crcFails        int          // records that failed their checksum in a row
	crcAt           uint64       // delivered when the last one failed
	resumes         int
	resumeMu        sync.Mutex // one resume at a time
}

// NewSession makes a session over conn (authenticated, with hello.Link set) that
// retains up to retain bytes for resends (RetainFor gives the size for a connection).
func NewSession(conn net.Conn, retain int, cfg SessionConfig) *Session {
	s := &Session{cfg: cfg, conn: conn, changed: make(chan struct{}), peerName: PeerName(conn)}
	s.idle = sync.NewCond(&s.mu)
	s.ring.max = retain + writePiece
	return s
}

// writePiece is the most a Session writes per system call (see Write).
const writePiece = 4 << 20

// RetainFor is the ring size a session over conn needs: what this host's send buffer
// and the peer's receive buffer can hold (the kernel reports both as allocated, twice
// what was asked), with peerRcvbuf assumed equal to this side's, plus 1 MiB for
// what a TLS reader buffers and for the kernel's overshoot.
func RetainFor(conn net.Conn) int {
	snd, rcv := 8<<20, 8<<20
	if tc := rawTCP(conn); tc != nil {
		if sc, err := tc.SyscallConn(); err == nil {
			_ = sc.Control(func(fd uintptr) {
				if v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF); err == nil {
					snd = v
				}
				if v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF); err == nil {
					rcv = v
				}
			})
		}
	}
	return snd + rcv + 1<<20
}

// rawTCP is the TCP connection under c (plain or TLS), or nil.
func rawTCP(c net.Conn) *net.TCPConn {
	if w, ok := c.(interface{ raw() net.Conn }); ok { // a test's wrapper
		c = w.raw()
	}
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case *tlsConn:
		tc, _ := c.raw.Conn.(*net.TCPConn)
		return tc
	}
	return nil
}

// abort drops c with a reset, never a FIN: the peer must not read the end of its
// stream (io.EOF) where this side only gave up on one connection.
func abort(c net.Conn) {
	if tc := rawTCP(c); tc != nil {
		_ = tc.SetLinger(0)
		_ = tc.Close()
		return
	}
	_ = c.Close()
}

// finReceived reports whether c's end-of-file is the peer's FIN (the connection waits
// for this side to close: CLOSE_WAIT) rather than a reset. Linux reports a reset's
// error once, to whichever call comes first: when a write took it, the next read
// returns end-of-file as if the peer had closed, and the socket is CLOSED. A
// connection it cannot tell about (not TCP) counts as closed by the peer.
func finReceived(c net.Conn) bool {
	tc := rawTCP(c)
	if tc == nil {
		return true
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return true
	}
	fin := true
	_ = sc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			fin = info.State == unix.BPF_TCP_CLOSE_WAIT
		}
	})
	return fin
}

// Conn returns the current connection (for PeerName and tests).
func (s *Session) Conn() net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

// Resumes is how many times the session has reconnected.
func (s *Session) Resumes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumes
}

// Down reports whether the session is reconnecting, and since when.
func (s *Session) Down() (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down && s.err == nil, s.since
}

// Counts returns the bytes written into and delivered out of the stream so far.
func (s *Session) Counts() (sent, delivered uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent, s.delivered
}

// notify wakes every waiter (s.mu held).
func (s *Session) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// acquire waits until the session has a connection to read (or write) on, within the
// read (write) deadline, and counts the caller in flight on it.
func (s *Session) acquire(write bool) (net.Conn, uint64, error) {
	s.mu.Lock()
	for {
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return nil, 0, err
		}
		if !s.down && !(write && s.resend) {
			s.inflight++
			c, gen := s.conn, s.gen
			s.mu.Unlock()
			return c, gen, nil
		}
		dl := s.rdl
		if write {
			dl = s.wdl
		}
		ch := s.changed
		s.mu.Unlock()
		var timer <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return nil, 0, os.ErrDeadlineExceeded
			}
			t := time.NewTimer(d)
			timer = t.C
			defer t.Stop()
		}
		select {
		case <-ch:
		case <-timer:
		}
		s.mu.Lock()
	}
}

// release ends an operation that acquire started (s.mu held).
func (s *Session) release() {
	s.inflight--
	if s.inflight == 0 {
		s.idle.Broadcast()
	}
}

// isTimeout reports a passed deadline (which the caller asked for, never a break).
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// Read implements net.Conn.
func (s *Session) Read(p []byte) (int, error) {
	for {
		c, gen, err := s.acquire(false)
		if err != nil {
			return 0, err
		}
		n, err := s.readFrom(c, p)
		s.mu.Lock()
		s.delivered += uint64(n)
		if s.crcFails > 0 && s.delivered > s.crcAt {
			s.crcFails = 0 // a good record since: the failures are no longer in a row
		}
		s.release()
		switch {
		case err == nil:
		case isTimeout(err):
		case gen != s.gen || s.down:
			err = nil // a connection given up already: read on the next one
		case errors.Is(err, io.EOF) && !s.closed && (s.cfg.Retry == 0 || finReceived(c)):
			// The peer closed its end: the stream is over, nothing to resume. (An
			// end-of-file on a connection that was reset is a break: see finReceived.)
			s.err = io.EOF
			s.notify()
		default:
			s.breakLocked(gen, err)
			err = nil
		}
		s.mu.Unlock()
		if n > 0 || err != nil {
			return n, err
		}
	}
}

// Write implements net.Conn.
func (s *Session) Write(b []byte) (int, error) {
	total := 0
	for {
		c, gen, err := s.acquire(true)
		if err != nil {
			s.mu.Lock()
			s.unsent = 0
			s.mu.Unlock()
			return total, err
		}
		s.mu.Lock()
		if k := int(min(s.skip, uint64(len(b)))); k > 0 { // the peer has these already
			s.record(b[:k])
			b, total, s.skip = b[k:], total+k, s.skip-uint64(k)
		}
		s.unsent = 0
		s.mu.Unlock()
		// Into the ring before the bytes go out, never after: once they are out, the
		// peer may answer, and the caller may reuse b for the answer before Write
		// returns (an all-reduce forwards into what it sent). Only this writer touches
		// the ring while it is in flight.
		// A write goes out in pieces of at most writePiece, each copied first; the ring
		// holds writePiece more than the retained size, so that a piece that went out
		// only in part never costs a byte of what must stay held.
		piece := b[:min(len(b), writePiece)]
		s.ring.write(piece)
		n := 0
		if len(b) > 0 || total == 0 {
			n, err = s.writeTo(c, piece)
		}
		s.mu.Lock()
		s.sent += uint64(n)
		s.ring.rewind(s.sent) // what did not go out is not in the stream
		s.release()
		b, total = b[n:], total+n
		switch {
		case err == nil && len(b) > 0:
			s.mu.Unlock()
			continue
		case err == nil || callersTimeout(err, s.wdl):
			s.mu.Unlock()
			return total, err
		case gen == s.gen && !s.down:
			s.breakLocked(gen, err)
		}
		s.unsent = len(b)
		s.mu.Unlock()
	}
}

// record appends bytes the peer has to the stream's count and ring (s.mu held).
func (s *Session) record(b []byte) {
	s.sent += uint64(len(b))
	s.ring.write(b)
}

// breakLocked starts the reconnect after connection gen failed with cause (s.mu held).
func (s *Session) breakLocked(gen uint64, cause error) {
	if gen != s.gen || s.down || s.err != nil || s.closed {
		return
	}
	if errors.Is(cause, ErrChecksum) {
		s.crcFails, s.crcAt = s.crcFails+1, s.delivered
		if s.cfg.Retry == 0 || s.crcFails > maxChecksumFails {
			s.err = fmt.Errorf("rank %d, link channel %d: %w (%d records failed it in a row)", s.cfg.Peer, s.cfg.Channel, cause, s.crcFails)
			abort(s.conn)
			s.notify()
			s.cfg.Log(s.err.Error())
			return
		}
	}
	if s.cfg.Retry == 0 {
		s.err = fmt.Errorf("rank %d, link channel %d: %w", s.cfg.Peer, s.cfg.Channel, cause)
		abort(s.conn)
		s.notify()
		return
	}
	s.down, s.since = true, time.Now()
	abort(s.conn)
	s.notify()
	s.cfg.Log(fmt.Sprintf("link to rank %d (channel %d) broke: %v; reconnecting for up to %v",
		s.cfg.Peer, s.cfg.Channel, cause, s.cfg.Retry))
	s.cfg.Guard.Go("tcp reconnect", nil, func(err error) { s.fail(err) }, func() { s.reconnect(gen) })
}

// fail ends the session with err.
func (s *Session) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		abort(s.conn)
		s.notify()
	}
}

// Close implements net.Conn: the peer reads the end of the stream.
func (s *Session) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.err == nil {
		s.err = net.ErrClosed
	}
	s.notify()
	return s.conn.Close()
}

// LocalAddr implements net.Conn.
func (s *Session) LocalAddr() net.Addr { return s.Conn().LocalAddr() }

// RemoteAddr implements net.Conn.
func (s *Session) RemoteAddr() net.Addr { return s.Conn().RemoteAddr() }

// SetDeadline implements net.Conn.
func (s *Session) SetDeadline(t time.Time) error {
	_ = s.SetReadDeadline(t)
	return s.SetWriteDeadline(t)
}

// SetReadDeadline implements net.Conn; it holds across reconnects.
func (s *Session) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rdl = t
	s.notify()
	if !s.down {
		_ = s.conn.SetReadDeadline(t) // a broken connection's error is the reconnect's
	}
	return nil
}

// SetWriteDeadline implements net.Conn; it holds across reconnects.
func (s *Session) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wdl = t
	s.notify()
	if !s.down && !s.resend { // a resend keeps its own deadline until it is done
		_ = s.conn.SetWriteDeadline(t)
	}
	return nil
}
