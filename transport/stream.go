package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"github.com/gonccl/gonccl/internal/safego"
)

// HeaderSize is the encoded size of a Header on the wire.
const HeaderSize = 48

// headerSize is HeaderSize, for this package's own use.
const headerSize = HeaderSize

// frameMagic starts every frame so a stray byte stream is recognised at once.
const frameMagic = 0x474e4346 // "GNCF"

// smallFrame is the payload size up to which header and payload go out in one write.
const smallFrame = 4096

// StreamLink frames messages over an ordered byte stream.
type StreamLink struct {
	peer   int
	conn   net.Conn
	failed atomic.Bool
	failAt atomic.Int64 // unix nanoseconds after which a failed link sends no more
	wbuf   [headerSize + smallFrame]byte
	rbuf   [headerSize]byte
	vec    [2][]byte
	bufs   net.Buffers // kept here so that writev does not allocate
	stale  atomic.Pointer[StaleHandler]
}

// OnStale implements StaleDropper.
func (l *StreamLink) OnStale(h StaleHandler) { l.stale.Store(&h) }

// NewStreamLink returns a Link to peer over conn. The link owns conn.
func NewStreamLink(peer int, conn net.Conn) *StreamLink {
	return &StreamLink{peer: peer, conn: conn}
}

// Peer implements Link.
func (l *StreamLink) Peer() int { return l.peer }

// Conn returns the connection under the link, for a transport that takes it over
// (shm keeps it open as the pair's liveness channel). Do not use the link after that.
func (l *StreamLink) Conn() net.Conn { return l.conn }

// Close implements Link.
func (l *StreamLink) Close() error {
	l.failAt.CompareAndSwap(0, 1) // long past: no more sends
	l.failed.Store(true)
	return l.conn.Close()
}

// Fail implements Link.
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

var errFailed = fmt.Errorf("link shut down after an earlier error: %w", ErrPeerClosed)

// Send implements Link.
func (l *StreamLink) Send(h *Header, p []byte, deadline time.Time) error {
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
	encodeHeader(l.wbuf[:headerSize], h, uint32(len(p)))
	if len(p) <= smallFrame {
		n := copy(l.wbuf[headerSize:], p)
		_, err := l.conn.Write(l.wbuf[:headerSize+n])
		return l.wrap("send to", err)
	}
	// Header and payload in one writev: one system call, and no lone header segment
	// on the wire (TCP_NODELAY would send it at once).
	l.vec[0], l.vec[1] = l.wbuf[:headerSize], p
	l.bufs = l.vec[:]
	_, err := l.bufs.WriteTo(l.conn)
	l.vec[1] = nil
	return l.wrap("send to", err)
}

// Recv implements Link.
func (l *StreamLink) Recv(want *Header, p []byte, deadline time.Time) error {
	if l.failed.Load() {
		return errFailed
	}
	if err := l.conn.SetReadDeadline(deadline); err != nil {
		return l.wrap("receive from", err)
	}
	var got Header
	for {
		if _, err := io.ReadFull(l.conn, l.rbuf[:]); err != nil {
			return l.wrap("receive from", err)
		}
		var err error
		if got, err = decodeHeader(l.rbuf[:]); err != nil {
			return fmt.Errorf("receive from rank %d: %w", l.peer, err)
		}
		if !IsStale(&got, want) {
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
	if got != w {
		return &MismatchError{Peer: l.peer, Want: w, Got: got}
	}
	_, err := io.ReadFull(l.conn, p)
	return l.wrap("receive from", err)
}

// wrap turns a stream error into one that matches the package's sentinels.
func (l *StreamLink) wrap(what string, err error) error { return wrapErr(l.peer, what, err) }

func wrapErr(peer int, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s rank %d: %w", what, peer, ErrTimeout)
	default:
		return fmt.Errorf("%s rank %d: %w (%v)", what, peer, ErrPeerClosed, err)
	}
}

// EncodeHeader writes h, with payload length n, into b (at least HeaderSize bytes),
// exactly as StreamLink sends it.
func EncodeHeader(b []byte, h *Header, n uint32) { encodeHeader(b, h, n) }

// DecodeHeader parses a header written by EncodeHeader.
func DecodeHeader(b []byte) (Header, error) { return decodeHeader(b) }

func encodeHeader(b []byte, h *Header, n uint32) {
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	b[4], b[5], b[6], b[7] = h.Kind, h.DType, h.Op, h.Algo
	binary.LittleEndian.PutUint64(b[8:], h.Seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(h.Root))
	binary.LittleEndian.PutUint32(b[20:], n)
	binary.LittleEndian.PutUint64(b[24:], h.Count)
	binary.LittleEndian.PutUint64(b[32:], h.Offset)
	binary.LittleEndian.PutUint32(b[40:], 0) // reserved (StripedLink: the stripe's offset)
	binary.LittleEndian.PutUint32(b[44:], h.Epoch)
}

func decodeHeader(b []byte) (Header, error) {
	if m := binary.LittleEndian.Uint32(b[0:]); m != frameMagic {
		return Header{}, fmt.Errorf("bad frame magic %#x: the stream is corrupt or out of step", m)
	}
	return Header{
		Kind:   b[4],
		DType:  b[5],
		Op:     b[6],
		Algo:   b[7],
		Seq:    binary.LittleEndian.Uint64(b[8:]),
		Root:   int32(binary.LittleEndian.Uint32(b[16:])),
		Len:    binary.LittleEndian.Uint32(b[20:]),
		Count:  binary.LittleEndian.Uint64(b[24:]),
		Offset: binary.LittleEndian.Uint64(b[32:]),
		Epoch:  binary.LittleEndian.Uint32(b[44:]),
	}, nil
}
