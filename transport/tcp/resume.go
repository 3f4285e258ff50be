package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"
)

// The reconnect protocol around a Session (session.go). After the handshake of a
// connection whose Hello has Resume set:
//
//	data channel: acceptor -> dialler: "GNCS", its delivered count (8 bytes),
//	              or a refusal (ErrStaleLink, ErrCountMismatch, a closed link);
//	              then both resend what the other lacks and the stream goes on
//	ChannelCall:  nothing; the dialler reconnects the link if its generation is the
//	              one that broke
const resumeMagic = 0x53434e47 // "GNCS"

// Registry holds a rank's sessions, so that a reconnect finds the one it resumes.
type Registry struct {
	mu sync.Mutex
	m  map[regKey]*Session
}

type regKey struct {
	peer int
	link uint64
}

// Add files s, the session to peer with id link.
func (r *Registry) Add(peer int, link uint64, s *Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[regKey]*Session{}
	}
	r.m[regKey{peer, link}] = s
}

// Remove forgets every session to peer.
func (r *Registry) Remove(peer int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.m {
		if k.peer == peer {
			delete(r.m, k)
		}
	}
}

// All lists every session.
func (r *Registry) All() []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	ss := make([]*Session, 0, len(r.m))
	for _, s := range r.m {
		ss = append(ss, s)
	}
	return ss
}

// Sessions lists the sessions to peer.
func (r *Registry) Sessions(peer int) []*Session {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ss []*Session
	for k, s := range r.m {
		if k.peer == peer {
			ss = append(ss, s)
		}
	}
	return ss
}

// Serve handles conn, an authenticated connection whose Hello h has Resume set: a
// reconnect of one of this rank's sessions (the acceptor's side), or a call asking
// this rank to reconnect one (the dialler's side). It returns why it refused, and
// owns conn either way.
func (r *Registry) Serve(conn net.Conn, h Hello) error {
	r.mu.Lock()
	s := r.m[regKey{h.From, h.Link}]
	r.mu.Unlock()
	if h.Channel == ChannelCall && h.Count == askDelivered {
		defer conn.Close()
		d, err := s.deliveredForAsk(h)
		if err != nil {
			refuse(conn, err.Error())
			return err
		}
		return writeAnswer(conn, d, time.Second)
	}
	if h.Channel == ChannelCall {
		defer conn.Close()
		if s == nil || s.cfg.Redial == nil || !s.kick(h.Count) {
			err := fmt.Errorf("rank %d asks this rank to reconnect link %#x, which it does not have (any more): %w", h.From, h.Link, ErrStaleLink)
			refuse(conn, err.Error())
			return err
		}
		return nil
	}
	if s == nil || s.cfg.Channel != h.Channel || s.cfg.Redial != nil || s.cfg.Checksum != h.Checksum {
		err := fmt.Errorf("rank %d reconnects link %#x on channel %d, which this rank does not have: %w", h.From, h.Link, h.Channel, ErrStaleLink)
		refuse(conn, err.Error())
		conn.Close()
		return err
	}
	err := s.Resume(conn, h.Count, func(delivered uint64) error { return writeAnswer(conn, delivered, s.cfg.Retry) })
	if err != nil {
		refuse(conn, err.Error())
		conn.Close()
	}
	return err
}

// writeAnswer writes a reconnect's (or an ask's) answer: this side's delivered count.
func writeAnswer(conn net.Conn, delivered uint64, within time.Duration) error {
	var b [12]byte
	binary.LittleEndian.PutUint32(b[0:], resumeMagic)
	binary.LittleEndian.PutUint64(b[4:], delivered)
	_ = conn.SetWriteDeadline(time.Now().Add(within))
	_, err := conn.Write(b[:])
	_ = conn.SetWriteDeadline(time.Time{})
	return err
}

// askDelivered is the Count of a ChannelCall hello that asks how many bytes of the
// link the other side has delivered (see Session.Linger), rather than for a reconnect.
const askDelivered = ^uint64(0)

// deliveredForAsk is s's delivered count for an ask from h.From, or why there is none
// (the link is closed, failed or unknown: the asker's bytes are no longer wanted).
func (s *Session) deliveredForAsk(h Hello) (uint64, error) {
	if s == nil {
		return 0, fmt.Errorf("rank %d asks about link %#x, which this rank does not have (any more): %w", h.From, h.Link, ErrStaleLink)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.closed {
		return 0, fmt.Errorf("link to rank %d is closed: %w", s.cfg.Peer, ErrStaleLink)
	}
	return s.delivered, nil
}

// AskDelivered asks the other end of session h.Link at addr how many bytes of it it
// has delivered (h.Channel ChannelCall, h.Resume set; Count is set here). A refusal
// (a *RefusedError) means it no longer has the link.
func AskDelivered(addr string, secret []byte, t *TLS, h Hello, deadline time.Time) (uint64, error) {
	h.Count = askDelivered
	c, err := DialOnce(addr, secret, t, h, deadline)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return readResumeAnswer(c, deadline)
}

// Linger waits, before this side closes the session on purpose, until the peer has
// delivered every byte this side wrote, asking it (SessionConfig.Ask) every little
// while: a break after the last write can then still be resent, as the session is
// still there to answer the peer's reconnect. It returns at deadline, when the peer no
// longer has the link (closed: it wants nothing more) or its host refuses (exited), or
// at once for a session that failed, never wrote, or does not reconnect.
func (s *Session) Linger(deadline time.Time) {
	if s.cfg.Ask == nil || s.cfg.Retry == 0 {
		return
	}
	wait := 5 * time.Millisecond
	for {
		s.mu.Lock()
		sent, over := s.sent, s.err != nil || s.closed
		s.mu.Unlock()
		if over || sent == 0 || !time.Now().Before(deadline) {
			return
		}
		try := time.Now().Add(2 * time.Second)
		if try.After(deadline) {
			try = deadline
		}
		d, err := s.cfg.Ask(try)
		var refused *RefusedError
		switch {
		case err == nil && d >= sent:
			return
		case errors.As(err, &refused), errors.Is(err, syscall.ECONNREFUSED):
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// kick breaks generation gen of the session, which the acceptor reports broken,
// unless this side has moved past it (or is reconnecting already). It reports false
// for a session that has failed or closed: it will never reconnect.
func (s *Session) kick(gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || s.closed {
		return false
	}
	if s.gen == gen && !s.down {
		s.breakLocked(gen, fmt.Errorf("rank %d reports the connection broken", s.cfg.Peer))
	}
	return true
}

// CallResume asks the dialler of session h.Link at addr to reconnect it (h.Channel
// ChannelCall, h.Resume set, h.Count the generation that broke): the acceptor's side.
// A dialler that no longer has the session refuses (a *RefusedError).
func CallResume(addr string, secret []byte, t *TLS, h Hello, deadline time.Time) error {
	c, err := DialOnce(addr, secret, t, h, deadline)
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = readResumeAnswer(c, deadline)
	if errors.Is(err, io.EOF) {
		return nil // taken: the dialler hangs up
	}
	return err
}

// DialResume reconnects session h.Link (h.Resume set, h.Count this side's delivered
// count) at addr, and returns the new connection and the acceptor's delivered count.
func DialResume(addr string, secret []byte, t *TLS, h Hello, deadline time.Time) (net.Conn, uint64, error) {
	c, err := DialOnce(addr, secret, t, h, deadline)
	if err != nil {
		return nil, 0, err
	}
	n, err := readResumeAnswer(c, deadline)
	if err != nil {
		abort(c)
		return nil, 0, fmt.Errorf("reconnect to %s: %w", addr, err)
	}
	return c, n, nil
}

// readResumeAnswer reads the acceptor's answer to a reconnect.
func readResumeAnswer(c net.Conn, deadline time.Time) (uint64, error) {
	_ = c.SetReadDeadline(deadline)
	defer c.SetReadDeadline(time.Time{})
	var b [12]byte
	if _, err := io.ReadFull(c, b[:5]); err != nil {
		return 0, err
	}
	if isRefusal(b[:]) {
		return 0, readRefusal(c, b[:5])
	}
	if binary.LittleEndian.Uint32(b[0:]) != resumeMagic {
		return 0, errors.New("not a reconnect answer (bad magic)")
	}
	if _, err := io.ReadFull(c, b[5:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[4:]), nil
}

// reconnect brings generation gen's session back (the dialler redials; the acceptor
// calls and waits), or fails it when the retry window closes.
func (s *Session) reconnect(gen uint64) {
	s.mu.Lock()
	for s.inflight > 0 {
		s.idle.Wait()
	}
	deadline := s.since.Add(s.cfg.Retry)
	s.mu.Unlock()
	backoff := 20 * time.Millisecond
	var last error // the last attempt's error, for the message past the window
	for {
		s.mu.Lock()
		done, failed := s.gen != gen || !s.down, s.err != nil || s.closed
		ch := s.changed
		s.mu.Unlock()
		if done || failed {
			return
		}
		now := time.Now()
		if !now.Before(deadline) {
			why := ""
			if last != nil {
				why = fmt.Sprintf(" (the last attempt: %v)", last)
			}
			s.fail(fmt.Errorf("rank %d: %w: the connection (channel %d) broke %v ago and did not come back within GONCCL_LINK_RETRY_MS=%d%s",
				s.cfg.Peer, ErrLinkDown, s.cfg.Channel, now.Sub(s.since).Round(time.Millisecond), s.cfg.Retry.Milliseconds(), why))
			return
		}
		try := now.Add(2 * time.Second)
		if try.After(deadline) {
			try = deadline
		}
		var err error
		if s.cfg.Redial != nil {
			s.resumeMu.Lock()
			s.mu.Lock()
			delivered := s.delivered
			s.mu.Unlock()
			var c net.Conn
			var peerDelivered uint64
			if c, peerDelivered, err = s.cfg.Redial(delivered, try); err == nil {
				if err = s.install(c, peerDelivered, deadline); err != nil {
					// A count out of range: the answer was corrupted on the way (the
					// acceptor checked this side's count against what it holds), or a
					// name that differs. Tried again; past the window, the error says so.
					abort(c)
				}
			}
			s.resumeMu.Unlock()
		} else {
			err = s.cfg.Call(gen, try)
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			s.fail(fmt.Errorf("rank %d: %w (its process has exited): %v", s.cfg.Peer, ErrPeerGone, err))
			return
		}
		var refused *RefusedError
		if errors.As(err, &refused) {
			s.fail(fmt.Errorf("rank %d: the reconnect was refused: %w", s.cfg.Peer, err))
			return
		}
		// ErrAuth (the acceptor's proof did not match) is tried again too: its reply
		// may have been corrupted on the way, and a stranger in the peer's place never
		// gets the link either way.
		last = err
		if err == nil && s.cfg.Redial != nil {
			continue
		}
		t := time.NewTimer(backoff)
		select { // a call's answer is the dialler's reconnect: wait for it a while
		case <-ch:
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// Resume takes over conn, a reconnect of this session whose dialler has delivered
// peerDelivered bytes (hello.Count): the acceptor's side. answer writes this side's
// delivered count to the dialler (see ResumeAnswer). A session that still thinks its
// connection is healthy (the break reached only the dialler) gives it up first.
func (s *Session) Resume(conn net.Conn, peerDelivered uint64, answer func(delivered uint64) error) error {
	s.resumeMu.Lock()
	defer s.resumeMu.Unlock()
	s.mu.Lock()
	if s.err != nil || s.closed {
		err := s.err
		s.mu.Unlock()
		return fmt.Errorf("link to rank %d is closed (%v): %w", s.cfg.Peer, err, ErrStaleLink)
	}
	if !s.down { // the break reached only the dialler: give up the old connection too
		s.breakLocked(s.gen, errors.New("the peer reconnected"))
	}
	for s.inflight > 0 {
		s.idle.Wait()
	}
	if err := s.checkLocked(peerDelivered); err != nil {
		s.mu.Unlock()
		return err
	}
	delivered := s.delivered
	s.mu.Unlock()
	if err := answer(delivered); err != nil {
		return err
	}
	return s.install(conn, peerDelivered, time.Now().Add(s.cfg.Retry))
}

// checkLocked refuses a peer's delivered count that this side did not send or no
// longer holds (s.mu held).
func (s *Session) checkLocked(peer uint64) error {
	lo := s.sent - uint64(s.ring.n)
	hi := s.sent + uint64(s.unsent)
	if peer < lo || peer > hi {
		return fmt.Errorf("rank %d says it has %d bytes of the link (channel %d); this rank sent %d and still holds bytes from %d: %w",
			s.cfg.Peer, peer, s.cfg.Channel, s.sent, lo, ErrCountMismatch)
	}
	return nil
}

// install makes conn the session's connection: reads go on at once, writes once the
// bytes the peer lacks (from its delivered count) are resent.
func (s *Session) install(conn net.Conn, peerDelivered uint64, deadline time.Time) error {
	name := PeerName(conn)
	if name != s.peerName {
		return fmt.Errorf("rank %d reconnected with certificate %q, not %q: %w", s.cfg.Peer, name, s.peerName, ErrStaleLink)
	}
	s.mu.Lock()
	if err := s.checkLocked(peerDelivered); err != nil {
		s.mu.Unlock()
		return err
	}
	if s.err != nil || s.closed {
		s.mu.Unlock()
		abort(conn)
		return nil
	}
	var missing []byte
	if peerDelivered > s.sent {
		s.skip = peerDelivered - s.sent
	} else {
		missing = s.ring.since(peerDelivered)
	}
	s.conn, s.gen = conn, s.gen+1
	s.rec = recordReader{} // records start afresh on the new connection
	_ = conn.SetReadDeadline(s.rdl)
	s.down, s.resend = false, true
	s.resumes++
	s.inflight++ // the resend below
	took := time.Since(s.since)
	s.notify()
	s.mu.Unlock()
	tlsNote := ""
	if name != "" {
		tlsNote = ", TLS 1.3, peer certificate " + name
	}
	s.cfg.Log(fmt.Sprintf("link to rank %d (channel %d) resumed after %v: %d bytes resent%s",
		s.cfg.Peer, s.cfg.Channel, took.Round(time.Millisecond), len(missing), tlsNote))
	_ = conn.SetWriteDeadline(deadline)
	_, err := s.writeTo(conn, missing)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.release()
	s.resend = false
	_ = conn.SetWriteDeadline(s.wdl)
	s.notify()
	if err != nil {
		s.breakLocked(s.gen, err)
	}
	return nil
}
