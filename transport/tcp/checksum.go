package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
)

// End-to-end checksums (GONCCL_CHECKSUM): a session's bytes travel in records, each
// a header (payload length, CRC32C of the payload, CRC32C of those eight bytes) and
// the payload, so that a frame a
// NIC, a switch or a middlebox corrupted in a way TCP's 16-bit checksum misses is
// caught before any of it reaches a link. A reader hands out a record's bytes only
// once the whole record has matched; a record that does not match is a break like a
// reset: the session reconnects and the peer resends from this side's delivered
// count, the bad record included. After maxChecksumFails of them in a row (no record
// matched between them: the path corrupts what it carries, or the same bytes again),
// or at the first with no retry window, the session fails with ErrChecksum, naming
// the rank and the connection. Failures spread out (a record now and then, with good
// ones between) are survived however many there are in all.
//
// The header's own CRC is checked before its length is believed: a length corrupted
// on the way (larger than the record) would have the reader wait for bytes the writer
// never sends, as it waits for the answer.
//
// Records are at most sessRecordMax bytes: large enough that the header costs nothing,
// small enough that what is checked is still in the cache. CRC32C runs on the SSE4.2
// instruction (hash/crc32 picks it), several GB/s a core.

// ErrChecksum means a record's bytes did not match their CRC32C: corrupted on the way.
var ErrChecksum = errors.New("frame checksum (CRC32C) mismatch")

const (
	sessRecordMax    = 1 << 20
	recordHeader     = 12
	maxChecksumFails = 16
)

var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// writeTo writes b to c, in records when the session checksums, and returns how many
// bytes of b went out (in whole records).
func (s *Session) writeTo(c net.Conn, b []byte) (int, error) {
	if !s.cfg.Checksum {
		return c.Write(b)
	}
	var hdr [recordHeader]byte
	done := 0
	for done < len(b) { // an empty write sends nothing: a record is never empty
		k := min(len(b)-done, sessRecordMax)
		p := b[done : done+k]
		binary.LittleEndian.PutUint32(hdr[0:], uint32(k))
		binary.LittleEndian.PutUint32(hdr[4:], crc32.Checksum(p, castagnoli()))
		binary.LittleEndian.PutUint32(hdr[8:], crc32.Checksum(hdr[:8], castagnoli()))
		bufs := net.Buffers{hdr[:], p}
		if _, err := bufs.WriteTo(c); err != nil {
			return done, err
		}
		done += k
	}
	return done, nil
}

// recordReader is the state of the record being read: its header, and the bytes of
// its payload read so far where they did not go straight to the caller.
type recordReader struct {
	hdr     [recordHeader]byte
	hdrGot  int
	n       int    // payload length (once the header is in)
	buf     []byte // payload read so far (buffered), or checked bytes not yet handed out
	checked bool   // buf holds checked bytes
}

// readFrom reads from c into p: straight through without checksums; with them, bytes
// of whole records that matched their CRC32C.
func (s *Session) readFrom(c net.Conn, p []byte) (int, error) {
	if !s.cfg.Checksum {
		return c.Read(p)
	}
	r := &s.rec
	if r.checked {
		n := copy(p, r.buf)
		r.buf = r.buf[n:]
		if len(r.buf) == 0 {
			*r = recordReader{}
		}
		return n, nil
	}
	for r.hdrGot < recordHeader {
		n, err := c.Read(r.hdr[r.hdrGot:])
		r.hdrGot += n
		if err != nil {
			return 0, err
		}
	}
	if crc32.Checksum(r.hdr[:8], castagnoli()) != binary.LittleEndian.Uint32(r.hdr[8:]) {
		return 0, fmt.Errorf("%w: a record header", ErrChecksum)
	}
	r.n = int(binary.LittleEndian.Uint32(r.hdr[0:]))
	if r.n == 0 || r.n > sessRecordMax {
		return 0, fmt.Errorf("%w: a record header says %d bytes", ErrChecksum, r.n)
	}
	want := binary.LittleEndian.Uint32(r.hdr[4:])
	if r.buf == nil && len(p) >= r.n { // the whole record straight into p
		got, err := io.ReadFull(c, p[:r.n])
		if err != nil {
			r.buf = append(make([]byte, 0, r.n), p[:got]...) // go on from there next time
			return 0, err
		}
		if crc32.Checksum(p[:r.n], castagnoli()) != want {
			return 0, ErrChecksum
		}
		n := r.n
		*r = recordReader{}
		return n, nil
	}
	if r.buf == nil {
		r.buf = make([]byte, 0, r.n)
	}
	for len(r.buf) < r.n {
		k, err := c.Read(r.buf[len(r.buf):r.n])
		r.buf = r.buf[:len(r.buf)+k]
		if err != nil {
			return 0, err
		}
	}
	if crc32.Checksum(r.buf, castagnoli()) != want {
		return 0, ErrChecksum
	}
	r.checked = true
	return s.readFrom(c, p)
}
