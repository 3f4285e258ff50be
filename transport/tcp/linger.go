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

// Lingering before a close (see LingerPeer) asks the peer how much of each session it
// has delivered. One ask covers every session a rank has with one peer, so a poll
// costs one connection (and one TLS handshake) per peer, not one per session:
//
//	asker -> answerer: handshake hello {ChannelCall, Resume, Link: the first link,
//	                   Count: askLinger}
//	asker -> answerer: lingerAsk: the number of links (4 bytes), their ids (8 bytes each)
//	answerer -> asker: lingerAnswer: "GNCL", per link its delivered count (8 bytes),
//	                   lingerGone for a link it no longer has (closed, failed, unknown),
//	                   then an HMAC of the links and counts with the communicator's
//	                   secret and the handshake's nonces (as a reconnect's answer:
//	                   resume.go), so a forged or corrupted count ends no wait early

// askLinger is the Count of a ChannelCall hello that opens a linger ask.
const askLinger = ^uint64(0) - 1

// lingerGone answers for a link the answerer no longer has: the asker's bytes are no
// longer wanted.
const lingerGone = ^uint64(0)

// maxLingerLinks bounds the links one ask may name.
const maxLingerLinks = 4096

const lingerMagic = 0x4c434e47 // "GNCL"

// IsLingerAsk reports whether h, an authenticated hello, opens a linger ask (ServeLinger).
func IsLingerAsk(h Hello) bool {
	return h.Channel == ChannelCall && h.Resume && h.Count == askLinger
}

// lingerAsk encodes the links an ask names.
func lingerAsk(links []uint64) []byte {
	b := make([]byte, 4+8*len(links))
	binary.LittleEndian.PutUint32(b, uint32(len(links)))
	for i, l := range links {
		binary.LittleEndian.PutUint64(b[4+8*i:], l)
	}
	return b
}

// readLingerAsk reads what lingerAsk wrote.
func readLingerAsk(r io.Reader) ([]uint64, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	count := binary.LittleEndian.Uint32(n[:])
	if count == 0 || count > maxLingerLinks {
		return nil, fmt.Errorf("a linger ask for %d links (1..%d)", count, maxLingerLinks)
	}
	b := make([]byte, 8*count)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	links := make([]uint64, count)
	for i := range links {
		links[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return links, nil
}

// lingerMAC authenticates an answer's counts for links, for hello h's handshake.
func lingerMAC(secret []byte, h Hello, links, counts []uint64) []byte {
	m := hmac.New(sha256.New, secret)
	var b [8]byte
	m.Write([]byte{'L'})
	m.Write(h.nonces[:])
	for i := range links {
		binary.LittleEndian.PutUint64(b[:], links[i])
		m.Write(b[:])
		binary.LittleEndian.PutUint64(b[:], counts[i])
		m.Write(b[:])
	}
	return m.Sum(nil)
}

// lingerAnswer encodes the delivered counts answering an ask for links, in the ask's
// order, authenticated for hello h's handshake.
func lingerAnswer(secret []byte, h Hello, links, counts []uint64) []byte {
	b := make([]byte, 4+8*len(counts), 4+8*len(counts)+macSize)
	binary.LittleEndian.PutUint32(b, lingerMagic)
	for i, d := range counts {
		binary.LittleEndian.PutUint64(b[4+8*i:], d)
	}
	return append(b, lingerMAC(secret, h, links, counts)...)
}

// readLingerAnswer reads the answer to an ask for links (or the answerer's refusal)
// and checks its MAC.
func readLingerAnswer(r io.Reader, secret []byte, h Hello, links []uint64) ([]uint64, error) {
	n := len(links)
	b := make([]byte, 4+8*n+macSize)
	if _, err := io.ReadFull(r, b[:5]); err != nil {
		return nil, err
	}
	if isRefusal(b) {
		return nil, readRefusal(r, b[:5])
	}
	if binary.LittleEndian.Uint32(b) != lingerMagic {
		return nil, errors.New("not a linger answer (bad magic)")
	}
	if _, err := io.ReadFull(r, b[5:]); err != nil {
		return nil, err
	}
	counts := make([]uint64, n)
	for i := range counts {
		counts[i] = binary.LittleEndian.Uint64(b[4+8*i:])
	}
	if !hmac.Equal(b[4+8*n:], lingerMAC(secret, h, links, counts)) {
		return nil, errBadAnswer
	}
	return counts, nil
}

// AskLinger asks the rank at addr how many bytes of each of links (sessions this rank
// has with it) it has delivered: one connection for all of them. h names this rank,
// the peer and the epoch; its session fields are set here. A count is lingerGone for
// a link the peer no longer has.
func AskLinger(addr string, secret []byte, t *TLS, h Hello, links []uint64, deadline time.Time) ([]uint64, error) {
	h.Channel, h.Resume, h.Link, h.Count = ChannelCall, true, links[0], askLinger
	c, err := dialOnce(addr, secret, t, &h, deadline)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if _, err := c.Write(lingerAsk(links)); err != nil {
		return nil, err
	}
	return readLingerAnswer(c, secret, h, links)
}

// ServeLinger answers conn, an authenticated linger ask from rank h.From (IsLingerAsk),
// and closes it.
func (r *Registry) ServeLinger(conn net.Conn, h Hello, secret []byte) error {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	links, err := readLingerAsk(conn)
	if err != nil {
		return fmt.Errorf("rank %d's linger ask: %w", h.From, err)
	}
	counts := make([]uint64, len(links))
	for i, l := range links {
		r.mu.Lock()
		s := r.m[regKey{h.From, l}]
		r.mu.Unlock()
		counts[i] = lingerGone
		if d, err := s.deliveredForAsk(Hello{From: h.From, Link: l}); err == nil {
			counts[i] = d
		}
	}
	_, err = conn.Write(lingerAnswer(secret, h, links, counts))
	return err
}

// LingerPeer waits, before this side closes sessions ss (all to one peer) on purpose,
// until the peer has delivered every byte written into each, asking it with ask
// (AskLinger, one connection per poll for all of them) every little while: a break after
// the last write can then still be resent, as the sessions are still there to answer
// the peer's reconnect. A session is done when the peer has its bytes or no longer has
// the link; all are at deadline, when the peer's host refuses (exited) or the peer
// refuses the ask. Sessions that failed, never wrote or do not reconnect are done at
// once.
func LingerPeer(ss []*Session, ask func(links []uint64, deadline time.Time) ([]uint64, error), deadline time.Time) {
	left := make([]*Session, 0, len(ss))
	for _, s := range ss {
		if s.cfg.Retry > 0 {
			left = append(left, s)
		}
	}
	wait := 5 * time.Millisecond
	for {
		var links []uint64
		var sent []uint64
		kept := left[:0]
		for _, s := range left {
			s.pumpAcks(time.Time{})
			s.mu.Lock()
			n, over := s.sent, s.err != nil || s.closed || s.acked >= s.sent
			s.mu.Unlock()
			if !over && n > 0 {
				kept = append(kept, s)
				links = append(links, s.cfg.Link)
				sent = append(sent, n)
			}
		}
		left = kept
		if len(left) == 0 || !time.Now().Before(deadline) {
			return
		}
		try := time.Now().Add(2 * time.Second)
		if try.After(deadline) {
			try = deadline
		}
		counts, err := ask(links, try)
		var refused *RefusedError
		switch {
		case errors.As(err, &refused), errors.Is(err, syscall.ECONNREFUSED):
			return
		case err == nil:
			kept := left[:0]
			for i, s := range left {
				if counts[i] != lingerGone && counts[i] < sent[i] {
					kept = append(kept, s)
				}
			}
			left = kept
			if len(left) == 0 {
				return
			}
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// LingerAll runs LingerPeer for every peer of ss at once (peer: each session's peer)
// and returns when every one has.
func LingerAll(ss []*Session, ask func(peer int, links []uint64, deadline time.Time) ([]uint64, error), deadline time.Time) {
	byPeer := map[int][]*Session{}
	for _, s := range ss {
		byPeer[s.cfg.Peer] = append(byPeer[s.cfg.Peer], s)
	}
	var wg sync.WaitGroup
	for peer, ps := range byPeer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			LingerPeer(ps, func(links []uint64, deadline time.Time) ([]uint64, error) { return ask(peer, links, deadline) }, deadline)
		}()
	}
	wg.Wait()
}
