package tcp

import (
	"crypto/hmac"
	"crypto/sha256"
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
//	data channel: acceptor -> dialler: answer{"GNCS", its delivered count, the
//	              generation, MAC}, or a refusal (ErrStaleLink, ErrCountMismatch,
//	              a closed link); then both resend what the other lacks and the
//	              stream goes on
//	ChannelCall:  nothing; the dialler reconnects the link if its generation is the
//	              one that broke (a linger ask: linger.go)
//
// The answer's MAC (HMAC-SHA256 with the communicator's secret) covers the
// handshake's two nonces, the link, the count and the generation: a count corrupted
// on the way, or an answer from anyone who did not take part in this handshake, is
// refused, and the session resumes exactly or not at all. The generation is the
// dialler's (Hello.Gen), adopted by the acceptor, so both ends number a connection
// alike even when an answer was lost and the dialler tried again.
const resumeMagic = 0x53434e47 // "GNCS"

// answerSize is the encoded size of an answer: magic, count, generation, MAC.
const answerSize = 4 + 8 + 8 + macSize

// Registry holds a rank's sessions, so that a reconnect finds the one it resumes.
// A session leaves it when it fails or closes.
type Registry struct {
	mu sync.Mutex
	m  map[regKey]*Session
}

type regKey struct {
	peer int
	link uint64
}

// Add files s, the session to peer with id link, until it ends.
func (r *Registry) Add(peer int, link uint64, s *Session) {
	k := regKey{peer, link}
	r.mu.Lock()
	if r.m == nil {
		r.m = map[regKey]*Session{}
	}
	r.m[k] = s
	r.mu.Unlock()
	s.onEnd(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.m[k] == s {
			delete(r.m, k)
		}
	})
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

// Len is how many sessions the registry holds.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
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
	err := s.Resume(conn, h, func(delivered uint64) error {
		return writeAnswer(conn, s.cfg.Secret, h, 'R', delivered, h.Gen, s.cfg.Retry)
	})
	if err != nil {
		refuse(conn, err.Error())
		conn.Close()
	}
	return err
}

// answerMAC authenticates an answer to hello h (role 'R' a reconnect, 'Q' an ask).
func answerMAC(secret []byte, role byte, h Hello, count, gen uint64) []byte {
	m := hmac.New(sha256.New, secret)
	var b [1 + 8 + 8 + 8]byte
	b[0] = role
	binary.LittleEndian.PutUint64(b[1:], h.Link)
	binary.LittleEndian.PutUint64(b[9:], count)
	binary.LittleEndian.PutUint64(b[17:], gen)
	m.Write(b[:])
	m.Write(h.nonces[:])
	return m.Sum(nil)
}

// writeAnswer writes a reconnect's (or an ask's) answer: this side's delivered count
// and the generation, authenticated for hello h's handshake.
func writeAnswer(conn net.Conn, secret []byte, h Hello, role byte, delivered, gen uint64, within time.Duration) error {
	var b [answerSize]byte
	binary.LittleEndian.PutUint32(b[0:], resumeMagic)
	binary.LittleEndian.PutUint64(b[4:], delivered)
	binary.LittleEndian.PutUint64(b[12:], gen)
	copy(b[20:], answerMAC(secret, role, h, delivered, gen))
	_ = conn.SetWriteDeadline(time.Now().Add(within))
	_, err := conn.Write(b[:])
	_ = conn.SetWriteDeadline(time.Time{})
	return err
}

// errBadAnswer means an answer's MAC did not match: corrupted on the way, or not from
// the peer this handshake was with.
var errBadAnswer = errors.New("the answer is not authentic (its MAC does not match the handshake)")

// readAnswer reads the answer to hello h (role as writeAnswer) and checks its MAC.
func readAnswer(c net.Conn, secret []byte, h Hello, role byte, deadline time.Time) (count, gen uint64, err error) {
	_ = c.SetReadDeadline(deadline)
	defer c.SetReadDeadline(time.Time{})
	var b [answerSize]byte
	if _, err := io.ReadFull(c, b[:5]); err != nil {
		return 0, 0, err
	}
	if isRefusal(b[:]) {
		return 0, 0, readRefusal(c, b[:5])
	}
	if binary.LittleEndian.Uint32(b[0:]) != resumeMagic {
		return 0, 0, errors.New("not a reconnect answer (bad magic)")
	}
	if _, err := io.ReadFull(c, b[5:]); err != nil {
		return 0, 0, err
	}
	count, gen = binary.LittleEndian.Uint64(b[4:]), binary.LittleEndian.Uint64(b[12:])
	if !hmac.Equal(b[20:], answerMAC(secret, role, h, count, gen)) {
		return 0, 0, errBadAnswer
	}
	return count, gen, nil
}

// deliveredForAsk is s's delivered count for a linger ask from h.From, or why there is
// none (the link is closed, failed or unknown: the asker's bytes are no longer wanted).
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
	c, err := dialOnce(addr, secret, t, &h, deadline)
	if err != nil {
		return err
	}
	defer c.Close()
	_, _, err = readAnswer(c, secret, h, 'R', deadline)
	if errors.Is(err, io.EOF) {
		return nil // taken: the dialler hangs up
	}
	return err
}

// DialResume reconnects session h.Link (h.Resume set, h.Count this side's delivered
// count, h.Gen the generation the connection will be) at addr, and returns the new
// connection and the acceptor's delivered count, from an answer authenticated for
// this handshake and naming the same generation.
func DialResume(addr string, secret []byte, t *TLS, h Hello, deadline time.Time) (net.Conn, uint64, error) {
	c, err := dialOnce(addr, secret, t, &h, deadline)
	if err != nil {
		return nil, 0, err
	}
	n, gen, err := readAnswer(c, secret, h, 'R', deadline)
	if err == nil && gen != h.Gen {
		err = fmt.Errorf("the answer names generation %d, not %d: %w", gen, h.Gen, errBadAnswer)
	}
	if err != nil {
		abort(c)
		return nil, 0, fmt.Errorf("reconnect to %s: %w", addr, err)
	}
	return c, n, nil
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
			delivered, next := s.delivered, s.gen+1
			s.mu.Unlock()
			var c net.Conn
			var peerDelivered uint64
			if c, peerDelivered, err = s.cfg.Redial(delivered, next, try); err == nil {
				if err = s.install(c, peerDelivered, next, deadline); err != nil {
					// A count out of range (the acceptor checked this side's count
					// against what it holds, and the answer is authentic: only a bug
					// gets here), or another certificate. Tried again; past the
					// window, the error says so.
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
		// ErrAuth (the acceptor's proof did not match) and an answer that is not
		// authentic are tried again too: corrupted on the way, maybe, and a stranger
		// in the peer's place never gets the link either way.
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

// Resume takes over conn, a reconnect of this session by the dialler of hello h
// (h.Count: what it has delivered; h.Gen: the connection's generation): the
// acceptor's side. It checks the dialler's certificate and count before answer writes
// this side's delivered count to it. A session that still thinks its connection is
// healthy (the break reached only the dialler) gives it up first.
func (s *Session) Resume(conn net.Conn, h Hello, answer func(delivered uint64) error) error {
	s.resumeMu.Lock()
	defer s.resumeMu.Unlock()
	if err := s.samePeer(conn); err != nil {
		return err
	}
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
	if err := s.checkLocked(h.Count); err != nil {
		s.mu.Unlock()
		return err
	}
	delivered := s.delivered
	s.mu.Unlock()
	if err := answer(delivered); err != nil {
		return err
	}
	return s.install(conn, h.Count, h.Gen, time.Now().Add(s.cfg.Retry))
}

// samePeer refuses a connection whose peer certificate is not the one the session's
// first connection had (the same leaf certificate, by its SHA-256 fingerprint; any
// other, even one the same CA signed with the same name, is another peer).
func (s *Session) samePeer(conn net.Conn) error {
	if got := PeerFingerprint(conn); got != s.peerCert {
		return fmt.Errorf("rank %d reconnected with certificate %q (fingerprint %.16s), not the one it connected with (%.16s): %w",
			s.cfg.Peer, PeerName(conn), got, s.peerCert, ErrStaleLink)
	}
	return nil
}

// checkLocked refuses a peer's delivered count that this side did not send or no
// longer keeps (s.mu held).
func (s *Session) checkLocked(peer uint64) error {
	lo := s.kept.lo(s.sent)
	if peer < lo || peer > s.sent {
		return fmt.Errorf("rank %d says it has %d bytes of the link (channel %d); this rank sent %d and still holds bytes from %d: %w",
			s.cfg.Peer, peer, s.cfg.Channel, s.sent, lo, ErrCountMismatch)
	}
	return nil
}

// install makes conn, of generation gen, the session's connection: reads go on at
// once, writes once the bytes the peer lacks (from its delivered count) are resent
// from what was kept.
func (s *Session) install(conn net.Conn, peerDelivered, gen uint64, deadline time.Time) error {
	if err := s.samePeer(conn); err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
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
	if peerDelivered > s.acked {
		s.acked = peerDelivered
		s.kept.trim(peerDelivered)
	}
	s.pieces = s.kept.slices(s.pieces[:0], peerDelivered, s.sent)
	missing := int(s.sent - peerDelivered)
	s.conn, s.gen = conn, gen
	s.ackSent = 0 // the peer learns the count again
	_ = conn.SetReadDeadline(s.rdl)
	s.down, s.resend = false, true
	s.resumes++
	s.inflight++ // the resend below
	took := time.Since(s.since)
	s.notify()
	s.mu.Unlock()
	tlsNote := ""
	if name := PeerName(conn); name != "" {
		tlsNote = ", TLS 1.3, peer certificate " + name
	}
	s.cfg.Log(fmt.Sprintf("link to rank %d (channel %d) resumed after %v: %d bytes resent%s",
		s.cfg.Peer, s.cfg.Channel, took.Round(time.Millisecond), missing, tlsNote))
	_ = conn.SetWriteDeadline(deadline)
	var err error
	if missing > 0 {
		_, err = s.writeRecords(conn, s.pieces, s.ackValue)
	}
	clear(s.pieces)
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
