package core

import (
	"fmt"
	"net"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/gonccl/gonccl/transport/tcp"
)

// The accepting side of connections on demand (see peers.go): the lower rank of a
// pair accepts, authenticates the connection and files it; a call from a lower rank
// makes this rank dial.

// acceptLoop accepts peers' connections until the listener closes. Strangers cannot
// stop it (see handshakes.go): at most maxHandshakes connections are authenticated at
// once, and a failed Accept (out of descriptors) is tried again after a pause.
func (s *peerSet) acceptLoop() {
	var pause time.Duration
	for {
		c, err := s.l.AcceptTCP()
		if err != nil {
			var again bool
			if pause, again = acceptPause(err, pause); !again {
				return
			}
			if pause == firstAcceptPause { // the first of a run of failures
				s.logs.net.Warn("accepting a connection failed, trying again", zap.Error(err))
			}
			time.Sleep(pause)
			continue
		}
		pause = 0
		tcp.Accepted(c)
		now := time.Now()
		if n := s.gate.report(now, 10*time.Second); n > 0 {
			s.logs.net.Warn(fmt.Sprintf("dropped %d unauthenticated connections: at most %d are authenticated at once, "+
				"one that sent nothing giving way after %v, any after %v (strangers flooding this rank's port?)", n, s.gate.max, s.gate.grace, s.gate.slow))
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		evicted, ok := s.gate.admit(c, now)
		if !ok {
			s.mu.Unlock()
			c.Close()
			continue
		}
		s.inflight[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		if evicted != nil {
			evicted.Close()
		}
		done := func() {
			s.mu.Lock()
			delete(s.inflight, c)
			s.mu.Unlock()
			s.wg.Done()
		}
		s.guard.Go("peer handshake", nil, func(err error) { c.Close(); s.gate.done(c); done(); s.broken(err) }, func() {
			defer done()
			sc, h, err := tcp.Accept(c, s.secret, s.tls, time.Now().Add(s.handshake))
			if kept := s.gate.done(c); !kept { // dropped to make room: counted in the report
				c.Close()
				return
			}
			if err == nil {
				err = s.accepted(sc, h)
			}
			if err != nil {
				s.logs.net.Warn("dropped connection", zap.Stringer("from", c.RemoteAddr()), zap.Error(err))
				c.Close()
			}
		})
	}
}

// accepted files c, an incoming connection whose dialer proved hello h.
func (s *peerSet) accepted(c net.Conn, h tcp.Hello) error {
	n := len(s.ranks)
	if h.Epoch != s.epoch {
		return fmt.Errorf("rank %d belongs to communicator generation (epoch) %d, this one is epoch %d: a stale or foreign rank", h.From, h.Epoch, s.epoch)
	}
	if h.To != s.rank || h.From < 0 || h.From >= n || h.From == s.rank {
		return fmt.Errorf("peer claims to be rank %d calling rank %d", h.From, h.To)
	}
	p := h.From
	if tcp.IsLingerAsk(h) {
		return s.sess.ServeLinger(c, h, s.secret)
	}
	if h.Resume {
		return s.sess.Serve(c, h)
	}
	if h.Channel == tcp.ChannelCall {
		if p > s.rank {
			return fmt.Errorf("rank %d called, but a higher rank dials itself", p)
		}
		c.Close()
		s.guard.Go("peer call", nil, func(err error) { s.fail(p, err) }, func() {
			if _, err := s.connect(p, time.Now().Add(s.timeout), false); err != nil {
				s.logs.net.Warn(fmt.Sprintf("rank %d called, but: %v", p, err))
			}
		})
		return nil
	}
	if p < s.rank {
		return fmt.Errorf("rank %d dialled, but the higher rank of a pair dials", p)
	}
	c = s.session(c, h)
	sl := &s.slots[p]
	sl.mu.Lock()
	switch sl.state {
	case slotIdle:
		sl.state = slotAccepting
		sl.done = make(chan struct{})
	case slotAccepting:
		if sl.done == nil {
			sl.done = make(chan struct{})
		}
	default:
		sl.mu.Unlock()
		return fmt.Errorf("rank %d connected on channel %d, but its link is %s", p, h.Channel, map[slotState]string{
			slotDialing: "being dialled", slotReady: "made already", slotFailed: "failed"}[sl.state])
	}
	if sl.conns == nil {
		socks, _ := pairSockets(s.ranks[s.rank], s.ranks[p])
		sl.conns = make([]net.Conn, socks)
	}
	sock := tcp.CollSocket(h.Channel)
	var err error
	switch {
	case h.Channel != tcp.ChannelP2P && (sock < 0 || sock >= len(sl.conns)):
		err = fmt.Errorf("rank %d asked for unknown channel %d (its link has %d connections)", p, h.Channel, len(sl.conns))
	case h.Channel == tcp.ChannelP2P && sl.msg != nil, h.Channel != tcp.ChannelP2P && sl.conns[sock] != nil:
		err = fmt.Errorf("rank %d connected twice on channel %d", p, h.Channel)
	case h.Channel == tcp.ChannelP2P:
		sl.msg = c
	default:
		sl.conns[sock] = c
	}
	complete := err == nil && sl.msg != nil && !slices.Contains(sl.conns, nil)
	var conns []net.Conn
	var msg net.Conn
	if complete {
		conns, msg = sl.conns, sl.msg
		sl.conns, sl.msg = nil, nil
	}
	sl.mu.Unlock()
	if err != nil {
		return err
	}
	s.opened.Add(1)
	if complete {
		s.finish(p, conns, msg, time.Now().Add(s.timeout))
	}
	return nil
}
