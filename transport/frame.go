package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
)

// The framing every transport shares: the wire form of a collective frame's Header
// (tcp's links send it before each payload, shm writes it into its ring), the size up
// to which a stream writes header and payload in one write, and the mapping of a
// connection's errors onto the sentinels.

// HeaderSize is the encoded size of a Header on the wire.
const HeaderSize = 48

// frameMagic starts every frame so a stray byte stream is recognised at once.
const frameMagic = 0x474e4346 // "GNCF"

// SmallFrame is the payload size up to which a stream sends header and payload in one
// write, copied together into a buffer of HeaderSize+SmallFrame bytes (or
// MsgHeaderSize+SmallFrame for a point-to-point frame).
const SmallFrame = 4096

// EncodeHeader writes h, with payload length n, into b (at least HeaderSize bytes).
// Bytes 40..43 are a reserved word, written as zero; the tcp package's striped link
// puts a stripe's offset there. Bytes 44..47 hold the epoch in their low 24 bits and
// the flags in the top byte.
func EncodeHeader(b []byte, h *Header, n uint32) {
	binary.LittleEndian.PutUint32(b[0:], frameMagic)
	b[4], b[5], b[6], b[7] = h.Kind, h.DType, h.Op, h.Algo
	binary.LittleEndian.PutUint64(b[8:], h.Seq)
	binary.LittleEndian.PutUint32(b[16:], uint32(h.Root))
	binary.LittleEndian.PutUint32(b[20:], n)
	binary.LittleEndian.PutUint64(b[24:], h.Count)
	binary.LittleEndian.PutUint64(b[32:], h.Offset)
	binary.LittleEndian.PutUint32(b[40:], 0) // reserved (the striped link: the stripe's offset)
	binary.LittleEndian.PutUint32(b[44:], h.Epoch&MaxEpoch|uint32(h.Flags)<<24)
}

// DecodeHeader parses a header written by EncodeHeader (b holds at least HeaderSize
// bytes); it fails only on a bad magic, that is a stream out of step.
func DecodeHeader(b []byte) (Header, error) {
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
		Epoch:  binary.LittleEndian.Uint32(b[44:]) & MaxEpoch,
		Flags:  b[47],
	}, nil
}

// WrapConnErr turns an error from reading or writing a connection to peer into one
// that matches the sentinels: ErrTimeout for a passed deadline, ErrPeerClosed for
// anything else, the cause kept too (in the message, and for errors.Is: a reconnect
// that gave up, tcp.ErrLinkDown, says more than a closed connection). what says which
// way the bytes went ("send to", "receive from"). A nil err stays nil.
func WrapConnErr(peer int, what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%s rank %d: %w", what, peer, ErrTimeout)
	default:
		return fmt.Errorf("%s rank %d: %w (%w)", what, peer, ErrPeerClosed, err)
	}
}
