package tcp

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
)

// StreamLink frames messages over an ordered byte stream.
type StreamLink struct {
	peer   int
	conn   net.Conn
	failed atomic.Bool
	failAt atomic.Int64 // unix nanoseconds after which a failed link sends no more
	wbuf   [transport.HeaderSize + transport.SmallFrame]byte
	rbuf   [transport.HeaderSize]byte
	vec    [2][]byte
	bufs   net.Buffers // kept here so that writev does not allocate
	stale  atomic.Pointer[transport.StaleHandler]
}

// OnStale implements transport.StaleDropper.
func (l *StreamLink) OnStale(h transport.StaleHandler) { l.stale.Store(&h) }

// NewStreamLink returns a transport.Link to peer over conn. The link owns conn.
func NewStreamLink(peer int, conn net.Conn) *StreamLink {
	return &StreamLink{peer: peer, conn: conn}
}

// Peer implements transport.Link.
func (l *StreamLink) Peer() int { return l.peer }

// Conn returns the connection under the link, for a transport that takes it over
// (shm keeps it open as the pair's liveness channel). Do not use the link after that.
func (l *StreamLink) Conn() net.Conn { return l.conn }

// Close implements transport.Link.
func (l *StreamLink) Close() error {
	l.failAt.CompareAndSwap(0, 1) // long past: no more sends
	l.failed.Store(true)
	return l.conn.Close()
}

// Fail implements transport.Link.
func (l *StreamLink) Fail(grace time.Duration) {
	now := time.Now()
	// failAt is set before failed, so a Send that sees failed also sees its grace.
	if !l.failAt.CompareAndSwap(0, now.Add(grace).UnixNano()) {
		return
	}
	l.failed.Store(true)
	_ = l.conn.SetReadDeadline(now)
	_ = l.conn.SetWriteDeadline(now.Add(grace))
	time.AfterFunc(grace, safego.Guard{}.Func("link close timer", nil, func() { l.conn.Close() }))
}

var errFailed = fmt.Errorf("link shut down after an earlier error: %w", transport.ErrPeerClosed)

// keeper is a connection that keeps what it sent by reference (a Session).
type keeper interface {
	WriteKept(hdr, p []byte) (int, error)
	Settle(deadline time.Time) error
}

// Send implements transport.Link.
func (l *StreamLink) Send(h *transport.Header, p []byte, deadline time.Time) error {
	return l.send(h, p, deadline, false)
}

// SendKept implements transport.Keeper: over a session, p goes out without a copy.
func (l *StreamLink) SendKept(h *transport.Header, p []byte, deadline time.Time) error {
	return l.send(h, p, deadline, true)
}

// Settle implements transport.Keeper.
func (l *StreamLink) Settle(deadline time.Time) error {
	if k, ok := l.conn.(keeper); ok {
		return l.wrap("send to", k.Settle(deadline))
	}
	return nil
}

func (l *StreamLink) send(h *transport.Header, p []byte, deadline time.Time, kept bool) error {
	if uint64(len(p)) > uint64(^uint32(0)) {
		return fmt.Errorf("frame of %d bytes is too large", len(p))
	}
	if l.failed.Load() {
		// Still send within the grace period: the frame tells the peer what this
		// rank was doing, so it can report the failure precisely.
		if at := time.Unix(0, l.failAt.Load()); at.Before(deadline) {
			deadline = at
		}
	}
	if err := l.conn.SetWriteDeadline(deadline); err != nil {
		return l.wrap("send to", err)
	}
	transport.EncodeHeader(l.wbuf[:transport.HeaderSize], h, uint32(len(p)))
	if k, ok := l.conn.(keeper); ok {
		// Header and payload in one record, one system call; a short payload is
		// copied with the header, a long one kept where it is.
		hdr := l.wbuf[:transport.HeaderSize]
		if len(p) <= transport.SmallFrame {
			hdr = l.wbuf[:transport.HeaderSize+copy(l.wbuf[transport.HeaderSize:], p)]
			p = nil
		}
		_, err := k.WriteKept(hdr, p)
		if err == nil && !kept {
			err = k.Settle(deadline)
		}
		return l.wrap("send to", err)
	}
	if len(p) <= transport.SmallFrame {
		n := copy(l.wbuf[transport.HeaderSize:], p)
		_, err := l.conn.Write(l.wbuf[:transport.HeaderSize+n])
		return l.wrap("send to", err)
	}
	// Header and payload in one writev: one system call, and no lone header segment
	// on the wire (TCP_NODELAY would send it at once).
	l.vec[0], l.vec[1] = l.wbuf[:transport.HeaderSize], p
	l.bufs = l.vec[:]
	_, err := l.bufs.WriteTo(l.conn)
	l.vec[1] = nil
	return l.wrap("send to", err)
}

// Recv implements transport.Link.
func (l *StreamLink) Recv(want *transport.Header, p []byte, deadline time.Time) error {
	if l.failed.Load() {
		return errFailed
	}
	if err := l.conn.SetReadDeadline(deadline); err != nil {
		return l.wrap("receive from", err)
	}
	var got transport.Header
	for {
		if _, err := io.ReadFull(l.conn, l.rbuf[:]); err != nil {
			return l.wrap("receive from", err)
		}
		var err error
		if got, err = transport.DecodeHeader(l.rbuf[:]); err != nil {
			return fmt.Errorf("receive from rank %d: %w", l.peer, err)
		}
		if !transport.IsStale(&got, want) {
			break
		}
		// A frame of an older generation: drop it whole and read on.
		if _, err := io.CopyN(io.Discard, l.conn, int64(got.Len)); err != nil {
			return l.wrap("receive from", err)
		}
		if h := l.stale.Load(); h != nil {
			(*h)(l.peer, got)
		}
	}
	w := *want
	w.Len = uint32(len(p))
	if !got.Matches(&w) {
		return &transport.MismatchError{Peer: l.peer, Want: w, Got: got}
	}
	if want.Flags != got.Flags { // written only when it differs: callers may share want with a Send
		want.Flags = got.Flags
	}
	_, err := io.ReadFull(l.conn, p)
	return l.wrap("receive from", err)
}

// wrap turns a stream error into one that matches transport's sentinels.
func (l *StreamLink) wrap(what string, err error) error {
	return transport.WrapConnErr(l.peer, what, err)
}
