package transport

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Point-to-point messages travel on a connection of their own (not a Link): one
// goroutine reads it continuously and matches what arrives against posted receives,
// so its frames carry a tag and a message number instead of a collective's header.

// MsgKind is the kind of a point-to-point frame.
type MsgKind uint8

// Point-to-point frame kinds. A message of at most the eager size travels as one
// MsgEager frame. A larger one is announced with MsgRTS; the receiver answers MsgCTS
// once a matching receive is posted (or MsgNack if that receive has another size), and
// only then does the sender write the payload as MsgData, straight into the receive
// buffer. A sender that gave up on an announced message answers a late MsgCTS with
// MsgCancel.
const (
	MsgEager  MsgKind = 1 // Seq, Tag, Len, DType; payload follows
	MsgRTS    MsgKind = 2 // Seq, Tag, Len, DType; no payload
	MsgCTS    MsgKind = 3 // Seq: the receiver's answer to the sender's MsgRTS Seq
	MsgData   MsgKind = 4 // Seq (the sender's), Len; payload follows
	MsgNack   MsgKind = 5 // Seq; Len: the byte size the receive expected
	MsgCancel MsgKind = 6 // Seq: the sender withdrew the announced message
	// A rank whose collective failed or timed out asks every peer where it stands
	// (MsgStatusQuery, Seq: the asker's operation number) and each answers with a
	// MsgStatus whose payload (Len bytes, at most MaxStatusBytes) is its report.
	MsgStatusQuery MsgKind = 7
	MsgStatus      MsgKind = 8
	// MsgBye tells the peer this rank is closing its communicator on purpose (destroy
	// or abort, for example after an error); its payload (Len bytes, at most
	// MaxStatusBytes) says why. A connection that ends without one means the rank died.
	MsgBye MsgKind = 9
	// MsgHeartbeat says "still here"; it carries nothing. Each rank sends one to a peer
	// it has not written to for a while, so that a peer that hears nothing at all for
	// the heartbeat timeout knows this rank (or the network to it) is gone.
	MsgHeartbeat MsgKind = 10
	// MsgLost tells the peer that a rank is gone (Tag: that rank) and why (payload, Len
	// bytes, at most MaxStatusBytes): the rank that saw it die or fall silent passes
	// the news on, so that ranks never connected to it learn it too (connections are
	// made on demand) and name it.
	MsgLost MsgKind = 11
	// MsgFailed tells the peer that a rank's communicator failed for a reason every
	// rank shares, which only that rank saw (its device path found the ranks calling
	// different operations, or one past the timeout): Tag is that rank, Seq the
	// failure's class, the payload (Len bytes, at most MaxStatusBytes) its message.
	// Each rank passes it on once, so that every rank names the cause.
	MsgFailed MsgKind = 12
	// MsgDevSize tells the peer the size of a device-path send to it (the device path
	// carries no sizes of its own): Seq is the message's number among this rank's
	// device-path sends to the peer (from 1), Len its bytes; no payload.
	MsgDevSize MsgKind = 13
	// MsgWinPut writes its payload (Len bytes) into the receiver's one-sided window
	// Tag at byte offset Seq; DType is the sender's data type. No reply: the sender's
	// request completes once the frame is written.
	MsgWinPut MsgKind = 14
	// MsgWinSignal adds one to the receiver's signal counter of window Tag for the
	// sender; no payload. It travels behind the sender's earlier puts, so a rank that
	// sees the signal sees their data.
	MsgWinSignal MsgKind = 15
	// MsgRefused tells the peer that this rank will not make its collective number Seq
	// (of kind Tag): a check of its arguments on this rank failed before the call, and
	// the payload (Len bytes, at most MaxStatusBytes) says why. The number is used up on
	// the sender, so ranks that all refused the same call stay in step.
	MsgRefused MsgKind = 16
	// msgKindMax is the highest kind a reader accepts.
	msgKindMax = MsgRefused
)

// MaxStatusBytes bounds a MsgStatus payload.
const MaxStatusBytes = 16 << 10

func (k MsgKind) String() string {
	switch k {
	case MsgEager:
		return "eager"
	case MsgRTS:
		return "rts"
	case MsgCTS:
		return "cts"
	case MsgData:
		return "data"
	case MsgNack:
		return "nack"
	case MsgCancel:
		return "cancel"
	case MsgStatusQuery:
		return "status-query"
	case MsgStatus:
		return "status"
	case MsgBye:
		return "bye"
	case MsgHeartbeat:
		return "heartbeat"
	case MsgLost:
		return "lost"
	case MsgFailed:
		return "failed"
	case MsgDevSize:
		return "dev-size"
	case MsgWinPut:
		return "win-put"
	case MsgWinSignal:
		return "win-signal"
	case MsgRefused:
		return "refused"
	}
	return fmt.Sprintf("msg(%d)", uint8(k))
}

// MsgHeader is the header of one point-to-point frame.
type MsgHeader struct {
	Kind  MsgKind
	DType uint8  // sender's data type (NCCL numbering), for error messages
	Seq   uint64 // message number, per direction of a rank pair
	Tag   int64
	Len   uint64 // payload bytes (MsgEager, MsgData), message bytes (MsgRTS, MsgNack)
}

// HasPayload reports whether Len payload bytes follow the header on the wire.
func (h *MsgHeader) HasPayload() bool {
	return h.Kind == MsgEager || h.Kind == MsgData || h.Kind == MsgStatus || h.Kind == MsgBye || h.Kind == MsgLost || h.Kind == MsgFailed || h.Kind == MsgWinPut ||
		h.Kind == MsgRefused
}

// MaxMsgLen bounds the length a point-to-point header may carry, so that no length read
// from the wire overflows an int64 (io.CopyN) or an int (a slice length). Receivers
// apply tighter limits of their own (the eager size, the posted receive's size).
const MaxMsgLen = 1<<62 - 1

// MsgHeaderSize is the encoded size of a MsgHeader.
const MsgHeaderSize = 32

// msgMagic starts every point-to-point frame.
const msgMagic = 0x474e4350 // "GNCP"

// EncodeMsgHeader writes h into b (at least MsgHeaderSize bytes).
func EncodeMsgHeader(b []byte, h *MsgHeader) {
	binary.LittleEndian.PutUint32(b[0:], msgMagic)
	b[4], b[5], b[6], b[7] = uint8(h.Kind), h.DType, 0, 0
	binary.LittleEndian.PutUint64(b[8:], h.Seq)
	binary.LittleEndian.PutUint64(b[16:], uint64(h.Tag))
	binary.LittleEndian.PutUint64(b[24:], h.Len)
}

// DecodeMsgHeader parses a header written by EncodeMsgHeader.
func DecodeMsgHeader(b []byte) (MsgHeader, error) {
	if m := binary.LittleEndian.Uint32(b[0:]); m != msgMagic {
		return MsgHeader{}, fmt.Errorf("bad message magic %#x: the stream is corrupt or out of step", m)
	}
	h := MsgHeader{
		Kind:  MsgKind(b[4]),
		DType: b[5],
		Seq:   binary.LittleEndian.Uint64(b[8:]),
		Tag:   int64(binary.LittleEndian.Uint64(b[16:])),
		Len:   binary.LittleEndian.Uint64(b[24:]),
	}
	if h.Kind < MsgEager || h.Kind > msgKindMax {
		return MsgHeader{}, fmt.Errorf("unknown message kind %d", b[4])
	}
	if h.Len > MaxMsgLen {
		return MsgHeader{}, fmt.Errorf("%s message of %d bytes exceeds the %d-byte limit", h.Kind, h.Len, uint64(MaxMsgLen))
	}
	return h, nil
}

// MsgConn reads and writes point-to-point frames on a connection. One goroutine may
// write while another reads.
type MsgConn struct {
	peer int
	conn net.Conn
	in   activityReader // reads conn, noting when bytes last arrived
	wbuf [MsgHeaderSize + SmallFrame]byte
	rbuf [MsgHeaderSize]byte
}

// NewMsgConn returns a MsgConn to peer over conn; it owns conn.
func NewMsgConn(peer int, conn net.Conn) *MsgConn {
	m := &MsgConn{peer: peer, conn: conn}
	m.in.conn = conn
	m.in.last.Store(time.Now().UnixNano())
	return m
}

// LastActivity is when bytes last arrived from the peer (or when the MsgConn was made).
func (m *MsgConn) LastActivity() time.Time { return time.Unix(0, m.in.last.Load()) }

// activityReader reads a connection and notes the time of every read that returned
// bytes, so that a long payload still counts as a sign of life while it arrives.
type activityReader struct {
	conn net.Conn
	last atomic.Int64 // unix ns
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.conn.Read(p)
	if n > 0 {
		a.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// Peer is the rank at the other end.
func (m *MsgConn) Peer() int { return m.peer }

// Write writes one frame: h, then p if h has a payload (h.Len must be len(p)).
func (m *MsgConn) Write(h *MsgHeader, p []byte, deadline time.Time) error {
	if err := m.conn.SetWriteDeadline(deadline); err != nil {
		return m.wrap("send to", err)
	}
	EncodeMsgHeader(m.wbuf[:], h)
	if len(p) <= SmallFrame {
		n := copy(m.wbuf[MsgHeaderSize:], p)
		_, err := m.conn.Write(m.wbuf[:MsgHeaderSize+n])
		return m.wrap("send to", err)
	}
	if _, err := m.conn.Write(m.wbuf[:MsgHeaderSize]); err != nil {
		return m.wrap("send to", err)
	}
	_, err := m.conn.Write(p)
	return m.wrap("send to", err)
}

// ReadHeader waits, without a deadline, for the next frame's header.
func (m *MsgConn) ReadHeader() (MsgHeader, error) {
	if err := m.conn.SetReadDeadline(time.Time{}); err != nil {
		return MsgHeader{}, m.wrap("receive from", err)
	}
	if _, err := io.ReadFull(&m.in, m.rbuf[:]); err != nil {
		return MsgHeader{}, m.wrap("receive from", err)
	}
	h, err := DecodeMsgHeader(m.rbuf[:])
	if err != nil {
		return MsgHeader{}, fmt.Errorf("receive from rank %d: %w", m.peer, err)
	}
	return h, nil
}

// ReadPayload reads len(p) payload bytes into p by deadline.
func (m *MsgConn) ReadPayload(p []byte, deadline time.Time) error {
	if err := m.conn.SetReadDeadline(deadline); err != nil {
		return m.wrap("receive from", err)
	}
	_, err := io.ReadFull(&m.in, p)
	return m.wrap("receive from", err)
}

// Discard reads and drops n payload bytes by deadline.
func (m *MsgConn) Discard(n uint64, deadline time.Time) error {
	if err := m.conn.SetReadDeadline(deadline); err != nil {
		return m.wrap("receive from", err)
	}
	_, err := io.CopyN(io.Discard, &m.in, int64(n))
	return m.wrap("receive from", err)
}

// Close closes the connection; blocked reads and writes return.
func (m *MsgConn) Close() error { return m.conn.Close() }

func (m *MsgConn) wrap(what string, err error) error { return WrapConnErr(m.peer, what, err) }
