package tcp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
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
//	  breaks: redials ─── hello{Resume, link, delivered, gen} ──►  checks link id, counts
//	          ◄────────── answer{delivered, gen, MAC} ────────────
//	  both: resend from the peer's delivered count, then carry on
//
// Each side counts the bytes it has written into the stream (sent) and handed to its
// reader (delivered). The stream travels in records (record.go) whose headers carry
// the writer's delivered count: the peer's acknowledgement. Until the peer has
// acknowledged them, a session keeps the bytes it sent, without copying them: as
// references into the writer's memory where the writer keeps that memory unchanged
// until it calls Settle (WriteKept: the links of a collective, which own their buffers
// until the operation ends), and as copies only of what is still unacknowledged when a
// writer takes its memory back (Settle, or the return of Write). Copies are charged to
// one process-wide budget (retain.go); a writer whose bytes do not fit waits for
// acknowledgements instead. Acknowledgements ride on the records going the other way,
// and a reader's session sends one alone every ackEvery bytes and, after ackDelay,
// when nothing carried it; the reader never waits for that. So a session costs a
// record header per MiB until a connection breaks; after a break it resends the
// unacknowledged bytes from what it kept, and a reconnect asking for bytes it no longer
// keeps is refused (ErrCountMismatch): the link fails, it is never resumed wrong.
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
	// the count the acceptor has delivered (see DialResume); gen is the generation
	// the new connection will be (Hello.Gen).
	Redial func(delivered, gen uint64, deadline time.Time) (net.Conn, uint64, error)
	// Call (the acceptor's side) asks the dialler to reconnect generation gen.
	Call func(gen uint64, deadline time.Time) error
	// Log reports breaks and resumes (INFO).
	Log func(msg string)
	// Guard runs the reconnecting goroutine.
	Guard safego.Guard
	// Checksum sets and checks a CRC32C for every record (record.go).
	Checksum bool
	// Secret is the communicator's: answers to a reconnect are authenticated with it.
	Secret []byte
}

// Session implements net.Conn over a sequence of connections (see above).
type Session struct {
	cfg      SessionConfig
	peerCert string // the peer's TLS certificate's fingerprint ("" over plain TCP): a reconnect must show the same
	unreg    func() // takes the session out of its registry when it ends

	mu       sync.Mutex
	idle     *sync.Cond // inflight dropped to zero
	conn     net.Conn   // the current connection
	gen      uint64     // connections installed so far - 1, the same on both ends
	down     bool       // the current connection broke; reads and writes wait
	resend   bool       // the new connection is being filled from what was kept; writes wait
	since    time.Time  // when it broke
	err      error      // the session failed: every call returns it
	closed   bool
	inflight int           // reads and writes running on conn
	changed  chan struct{} // closed and replaced at every change of the above, a deadline or an acknowledgement
	quit     chan struct{} // closed when the session ends: the acknowledger stops
	rdl, wdl time.Time

	sent, delivered uint64
	acked           uint64   // the peer's delivered count: what it acknowledged
	ackSent         uint64   // the delivered count this side last wrote in a record header
	writing         uint64   // payload bytes of the record being written (an ack may cover them)
	kept            retained // bytes sent and not yet acknowledged (retain.go)
	crcFails        int      // records that failed their checksum in a row
	crcAt           uint64   // delivered when the last one failed
	resumes         int
	resumeMu        sync.Mutex // one resume at a time

	writeMu sync.Mutex    // one writer of records at a time: Write, the acknowledger, a resend
	wr      recordWriter  // writeMu held
	pieces  [][]byte      // writeMu held: what a write hands writeRecords
	readMu  sync.Mutex    // one reader of records at a time: Read, pumpAcks
	rd      recordReader  // readMu held
	ackKick chan struct{} // a reader delivered bytes: the acknowledger looks
}

// NewSession makes a session over conn (authenticated, with hello.Link set).
func NewSession(conn net.Conn, cfg SessionConfig) *Session {
	s := &Session{cfg: cfg, conn: conn, changed: make(chan struct{}), quit: make(chan struct{}),
		peerCert: PeerFingerprint(conn), ackKick: make(chan struct{}, 1)}
	s.idle = sync.NewCond(&s.mu)
	if s.cfg.Log == nil {
		s.cfg.Log = func(string) {}
	}
	s.cfg.Guard.Go("tcp acknowledger", nil, func(err error) { s.fail(err) }, s.acknowledge)
	return s
}

// Acknowledgements sent alone: every ackEvery bytes delivered, and ackDelay after
// bytes were delivered that no record going out carried.
const (
	ackEvery = 256 << 10
	ackDelay = 500 * time.Microsecond
)

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
	s.readMu.Lock()
	defer s.readMu.Unlock()
	for {
		c, gen, err := s.acquire(false)
		if err != nil {
			return 0, err
		}
		s.rd.on(gen)
		n, err := s.readFrom(c, p)
		s.mu.Lock()
		s.delivered += uint64(n)
		if s.crcFails > 0 && s.delivered > s.crcAt {
			s.crcFails = 0 // a good record since: the failures are no longer in a row
		}
		// The acknowledger looks when bytes become due (it then waits ackDelay for a
		// record going out to carry them) and when ackEvery of them are.
		if due := s.delivered - s.ackSent; n > 0 && (due == uint64(n) || due >= ackEvery) {
			select {
			case s.ackKick <- struct{}{}:
			default:
			}
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
			s.endLocked(io.EOF)
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

// Write implements net.Conn: b goes out without a copy, and what of it the peer has
// not acknowledged when the write is done is copied then (Settle), as the caller may
// change b once Write returns.
func (s *Session) Write(b []byte) (int, error) {
	n, err := s.WriteKept(nil, b)
	s.mu.Lock()
	dl := s.wdl
	s.mu.Unlock()
	if serr := s.Settle(dl); err == nil {
		err = serr
	}
	return n, err
}

// WriteKept writes hdr and then p into the stream, as one write of the system where
// it can. hdr is copied (a frame header, short); p is kept by reference: the caller
// must not change it until Settle returns. It returns how many bytes of p went out.
func (s *Session) WriteKept(hdr, p []byte) (int, error) {
	total := 0
	for {
		c, gen, err := s.acquire(true)
		if err != nil {
			return total, err
		}
		s.writeMu.Lock()
		s.mu.Lock()
		at := s.sent
		s.kept.add(at, hdr, true)
		s.kept.add(at+uint64(len(hdr)), p, false)
		s.writing = uint64(len(hdr) + len(p))
		s.mu.Unlock()
		s.pieces = append(s.pieces[:0], hdr, p)
		n := 0
		if len(hdr)+len(p) > 0 {
			n, err = s.writeRecords(c, s.pieces, s.ackValue)
		}
		clear(s.pieces)
		s.mu.Lock()
		s.writing = 0
		s.sent += uint64(n)
		s.kept.dropAfter(s.sent) // what did not go out is not in the stream
		s.release()
		s.mu.Unlock()
		s.writeMu.Unlock()
		s.mu.Lock()
		if k := min(n, len(hdr)); k > 0 {
			hdr, n = hdr[k:], n-k
		}
		p, total = p[n:], total+n
		var partial *partialRecord
		switch {
		case err == nil && len(hdr)+len(p) > 0:
			s.mu.Unlock()
			continue
		case err == nil:
			s.mu.Unlock()
			return total, nil
		case errors.As(err, &partial):
			s.breakLocked(gen, err)
			s.mu.Unlock()
			return total, partial.err
		case callersTimeout(err, s.wdl):
			s.mu.Unlock()
			return total, err
		case gen == s.gen && !s.down:
			s.breakLocked(gen, err)
		}
		s.mu.Unlock()
	}
}

// ackValue is the delivered count a record header carries now; it counts as sent.
func (s *Session) ackValue() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ackSent = s.delivered
	return s.delivered
}

// gotAck takes the peer's delivered count from a record header: bytes up to it are no
// longer kept. A count past what this side sent is refused: the header lies.
func (s *Session) gotAck(a uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a <= s.acked {
		return nil
	}
	if a > s.sent+s.writing {
		return fmt.Errorf("rank %d acknowledges %d bytes of the link (channel %d); this rank sent %d: %w",
			s.cfg.Peer, a, s.cfg.Channel, s.sent, ErrCountMismatch)
	}
	s.acked = a
	s.kept.trim(a)
	s.notify()
	return nil
}

// Settle gives the writer its memory back: the bytes WriteKept wrote by reference that
// the peer has not yet acknowledged are copied, within the process-wide budget; those
// that do not fit are waited for (the peer's acknowledgement) until deadline (none:
// zero). Acknowledgements that arrived are taken first, without blocking.
func (s *Session) Settle(deadline time.Time) error {
	s.mu.Lock()
	need := s.kept.referenced()
	s.mu.Unlock()
	if need == 0 {
		return nil
	}
	s.pumpAcks(time.Time{})
	for {
		s.mu.Lock()
		need = s.kept.referenced()
		if need == 0 {
			s.mu.Unlock()
			return nil
		}
		if s.err != nil || s.closed { // nothing will be resent: let go
			s.kept.release()
			s.mu.Unlock()
			return nil
		}
		if retainBudget.take(need) {
			s.kept.own()
			s.mu.Unlock()
			sweepLater(s)
			return nil
		}
		freed := retainBudget.changed()
		s.mu.Unlock()
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			now, _ := RetainedBytes()
			return fmt.Errorf("rank %d, link channel %d: %d bytes sent are not yet acknowledged and the budget for keeping them is full (%d of %d bytes held; GONCCL_LINK_BUFFER_MB): %w",
				s.cfg.Peer, s.cfg.Channel, need, now, retainBudget.limit.Load(), os.ErrDeadlineExceeded)
		}
		wait := time.Now().Add(settleWait)
		if !deadline.IsZero() && deadline.Before(wait) {
			wait = deadline
		}
		if !s.pumpAcks(wait) {
			t := time.NewTimer(time.Until(wait))
			select {
			case <-freed:
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// pumpAcks takes the acknowledgements that arrived on the connection while nobody
// reads it (the link to a ring's next rank is only written): records with no payload
// are consumed, a record with a payload only has its header taken, for the reader to
// go on from. It waits for them until until (zero: takes only what is there). It
// reports false where it could not look (a reader is busy, the session is down).
func (s *Session) pumpAcks(until time.Time) bool {
	if !s.readMu.TryLock() {
		return false
	}
	defer s.readMu.Unlock()
	c, gen, err := s.acquire(false)
	if err != nil {
		return false
	}
	s.rd.on(gen)
	var perr error
	if until.IsZero() {
		perr = s.pumpNow(c)
	} else {
		_ = c.SetReadDeadline(until)
		for s.rd.left == 0 && len(s.rd.checked) == 0 {
			if perr = s.readHeader(c); perr != nil {
				break
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down && gen == s.gen {
		_ = c.SetReadDeadline(s.rdl)
	}
	s.release()
	if perr != nil && !isTimeout(perr) && !errors.Is(perr, errWouldBlock) {
		s.breakLocked(gen, perr)
	}
	return true
}

var errWouldBlock = errors.New("nothing to read")

// pumpNow takes the record headers that have arrived on c, without blocking.
func (s *Session) pumpNow(c net.Conn) error {
	tc, ok := c.(*net.TCPConn)
	if !ok { // TLS: records cannot be read without blocking; what comes within 1 ms
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		for s.rd.left == 0 && len(s.rd.checked) == 0 {
			if err := s.readHeader(c); err != nil {
				return err
			}
		}
		return nil
	}
	for s.rd.left == 0 && len(s.rd.checked) == 0 {
		if s.rd.buffered() < recordHeader {
			if err := s.fillNow(tc); err != nil {
				return err
			}
			if s.rd.buffered() < recordHeader {
				return nil
			}
		}
		if err := s.readHeader(c); err != nil {
			return err
		}
	}
	return nil
}

// fillNow reads what c has into the read-ahead buffer, without blocking.
func (s *Session) fillNow(tc *net.TCPConn) error {
	r := &s.rd
	if r.buf == nil {
		r.buf = make([]byte, readAhead)
	}
	if r.i > 0 {
		r.j = copy(r.buf, r.buf[r.i:r.j])
		r.i = 0
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return err
	}
	var n int
	var rerr error
	if err := sc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), r.buf[r.j:], unix.MSG_DONTWAIT)
		return true
	}); err != nil {
		return err
	}
	switch {
	case rerr == unix.EAGAIN || rerr == unix.EINTR:
		return nil
	case rerr != nil:
		return rerr
	case n == 0:
		return io.EOF
	}
	r.j += n
	return nil
}

// acknowledge is the session's acknowledger: after a reader delivered bytes it sends
// the delivered count alone, unless a record going out carried it meanwhile.
func (s *Session) acknowledge() {
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-s.ackKick:
		case <-s.quit:
			return
		}
		for first := true; ; {
			s.mu.Lock()
			due := s.delivered - s.ackSent
			s.mu.Unlock()
			if due == 0 {
				break
			}
			if due < ackEvery || !first { // maybe a record going out carries it
				t.Reset(ackDelay)
				select {
				case <-t.C:
				case <-s.quit:
					return
				}
			}
			first = false
			if s.sendAck() {
				break
			}
		}
	}
}

// sendAck writes a record with no payload that carries the delivered count, if no
// writer is busy (its next record carries it) and the connection is up. It reports
// false where it must be tried again.
func (s *Session) sendAck() bool {
	if !s.writeMu.TryLock() {
		return false
	}
	defer s.writeMu.Unlock()
	s.mu.Lock()
	if s.err != nil || s.closed || s.down || s.resend || s.delivered == s.ackSent {
		over := s.err != nil || s.closed || s.delivered == s.ackSent
		s.mu.Unlock()
		return over
	}
	c, gen := s.conn, s.gen
	s.inflight++
	s.ackSent = s.delivered
	putRecordHeader(s.wr.hdr[:], 0, s.delivered, 0)
	s.mu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, err := c.Write(s.wr.hdr[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen == s.gen && !s.down {
		_ = c.SetWriteDeadline(s.wdl)
	}
	s.release()
	if err != nil {
		s.breakLocked(gen, err)
	}
	return true
}

// breakLocked starts the reconnect after connection gen failed with cause (s.mu held).
func (s *Session) breakLocked(gen uint64, cause error) {
	if gen != s.gen || s.down || s.err != nil || s.closed {
		return
	}
	if errors.Is(cause, ErrChecksum) {
		s.crcFails, s.crcAt = s.crcFails+1, s.delivered
		if s.cfg.Retry == 0 || s.crcFails > maxChecksumFails {
			s.endLocked(fmt.Errorf("rank %d, link channel %d: %w (%d records failed it in a row)", s.cfg.Peer, s.cfg.Channel, cause, s.crcFails))
			abort(s.conn)
			s.notify()
			s.cfg.Log(s.err.Error())
			return
		}
	}
	if s.cfg.Retry == 0 {
		s.endLocked(fmt.Errorf("rank %d, link channel %d: %w", s.cfg.Peer, s.cfg.Channel, cause))
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
		s.endLocked(err)
		abort(s.conn)
		s.notify()
	}
}

// endLocked ends the session with err (s.mu held): every call returns it from now on,
// nothing kept is resent any more, and the session leaves its registry.
func (s *Session) endLocked(err error) {
	s.err = err
	s.kept.release()
	close(s.quit)
	if s.unreg != nil {
		go s.unreg()
	}
}

// onEnd has f run when the session ends (at once if it has).
func (s *Session) onEnd(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		go f()
		return
	}
	s.unreg = f
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
		s.endLocked(net.ErrClosed)
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

// Err is why the session failed or closed (nil while it lives).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}
