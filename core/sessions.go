package core

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/tcp"
)

// Links between hosts survive broken connections (GONCCL_LINK_RETRY_MS): every TCP
// connection of a pair that does not talk through shared memory is a tcp.Session,
// which the dialler (the higher rank) makes again when it breaks, and which then
// resumes its byte stream where it stopped (see transport/tcp/session.go). The links
// above (StreamLink, StripedLink, the point-to-point channel) never see the break.
// The acceptor asks the dialler to reconnect with a call, as connections on demand
// do. A session that does not come back within the window fails, naming the peer, and
// the link above fails with it as a dead connection does.

// With GONCCL_CHECKSUM=1 the sessions also carry a CRC32C per record (see
// transport/tcp/checksum.go); with GONCCL_LINK_RETRY_MS=0 and checksums on, they are
// sessions that never reconnect, so that a corrupted record fails the link.

// sessions reports whether the connections to peer are sessions.
func (s *peerSet) sessions(peer int) bool {
	me, ri := s.ranks[s.rank], s.ranks[peer]
	return (s.retry > 0 || s.checksum) && !(me.Host == ri.Host && me.Shm && ri.Shm)
}

// newLinkID returns a fresh session id for a connection to peer, or 0 where the
// pair's connections are no sessions.
func (s *peerSet) newLinkID(peer int) uint64 {
	if !s.sessions(peer) {
		return 0
	}
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// session wraps c, a connection of the pair this rank has with the other end of
// hello h (dialled by this rank if h.From is this rank), in a session if h asks for
// one and this rank reconnects at all.
func (s *peerSet) session(c net.Conn, h tcp.Hello) net.Conn {
	if h.Link == 0 || (s.retry == 0 && !h.Checksum) {
		return c
	}
	peer, dialler := h.From, h.From == s.rank
	if dialler {
		peer = h.To
	}
	cfg := tcp.SessionConfig{Peer: peer, Channel: h.Channel, Link: h.Link, Retry: s.retry, Guard: s.guard, Checksum: h.Checksum,
		Secret: s.secret, Log: func(m string) { s.logs.net.Info(m) }}
	addr := s.ranks[peer].Addr
	if dialler {
		cfg.Redial = func(delivered, gen uint64, deadline time.Time) (net.Conn, uint64, error) {
			rh := h
			rh.Resume, rh.Count, rh.Gen = true, delivered, gen
			return tcp.DialResume(addr, s.secret, s.tls, rh, deadline)
		}
	} else {
		cfg.Call = func(gen uint64, deadline time.Time) error {
			call := tcp.Hello{From: s.rank, To: peer, Channel: tcp.ChannelCall, Epoch: s.epoch, Link: h.Link, Resume: true, Count: gen}
			if err := tcp.CallResume(addr, s.secret, s.tls, call, deadline); err != nil {
				return fmt.Errorf("asking rank %d to reconnect: %w", peer, err)
			}
			return nil
		}
	}
	sess := tcp.NewSession(c, cfg)
	s.sess.Add(peer, h.Link, sess)
	return sess
}

// watchQuiet breaks, until stop closes, the sessions whose connection went quiet
// (tcp.QuietWatch: bytes unacknowledged and nothing heard for tcp.QuietTimeout): a
// link that goes quiet without a reset (a switch reboots, a cable is pulled) is then
// made again within the retry window, instead of waiting for TCP's own
// retransmissions, which back off to minutes apart.
func (s *peerSet) watchQuiet(stop <-chan struct{}) {
	d := tcp.QuietTimeout(s.retry)
	w := tcp.NewQuietWatch(d)
	t := time.NewTicker(d / 8)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			w.Check(s.sess.All(), now)
		}
	}
}

// linger waits, before a destroy closes the links, until every peer across hosts has
// delivered what this rank sent it, within the retry window (tcp.LingerPeer): a
// peer still reading the last message this rank sent, which a reset or a corrupted
// record makes it ask for again, finds the session there to resend it. A peer that
// exited or closed its end ends the wait at once. Each poll asks each peer once about
// all of its sessions (tcp.AskLinger).
func (s *peerSet) linger() {
	if s.retry == 0 {
		return
	}
	tcp.LingerAll(s.sess.All(), func(peer int, links []uint64, deadline time.Time) ([]uint64, error) {
		h := tcp.Hello{From: s.rank, To: peer, Epoch: s.epoch}
		return tcp.AskLinger(s.ranks[peer].Addr, s.secret, s.tls, h, links, deadline)
	}, time.Now().Add(s.retry))
}

// linkDown reports whether a connection to peer is reconnecting, and since when.
func (s *peerSet) linkDown(peer int) (bool, time.Time) {
	for _, ss := range s.sess.Sessions(peer) {
		if down, since := ss.Down(); down {
			return true, since
		}
	}
	return false, time.Time{}
}

// Collectives send without a copy between hosts: what an algorithm sends from memory
// that stays unchanged until the operation ends (its buffer, or what it received into
// it and forwards) goes out through transport.Keeper.SendKept, which keeps it by
// reference for resends; settle, as the operation ends, has every link it was sent on
// copy what its peer has not acknowledged yet (little: acknowledgements come back as
// the peer reads). Algorithms that reuse memory they sent from within the operation
// (staging slots, a recursive doubling's running sum) use send, which copies what is
// unacknowledged when each send returns. Where an algorithm overwrites a sent chunk,
// the peer has delivered it before (the data it receives there was computed from it),
// so no resend can ask for the overwritten bytes.

// noteKept records that the running operation sent to peer by reference.
func (s *peerSet) noteKept(peer int) {
	if s.slots[peer].kept.Swap(true) {
		return
	}
	s.keptMu.Lock()
	s.kept = append(s.kept, peer)
	s.keptMu.Unlock()
}

// settle hands every link the running operation sent on by reference its memory back
// (transport.Keeper.Settle), within deadline, and returns the first error.
func (s *peerSet) settle(deadline time.Time) error {
	s.keptMu.Lock()
	peers := s.kept
	s.kept = nil
	s.keptMu.Unlock()
	var first error
	for _, p := range peers {
		s.slots[p].kept.Store(false)
		if k, ok := s.linkIfAny(p).(transport.Keeper); ok {
			if err := k.Settle(deadline); err != nil && first == nil {
				first = fmt.Errorf("rank %d: %w", p, err)
			}
		}
	}
	return first
}

// gaveUp reports whether err, which ended a link to a peer, proves the peer (or the
// network to it) gone: a reconnect that did not come back within the retry window, or
// whose every attempt the peer's host refused (no process listens there). A link the
// peer closed, or whose reconnect the peer refused (it is alive and gave the link up),
// proves nothing of the kind: see Comm.awaitCause.
func gaveUp(err error) bool {
	return errors.Is(err, tcp.ErrLinkDown) || errors.Is(err, tcp.ErrPeerGone)
}
