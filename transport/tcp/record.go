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

// A Session's bytes travel in records: a header (payload length, the writer's
// delivered count, a CRC32C of the payload or zero, a CRC32C of those 16 bytes), then
// the payload. The delivered count is the acknowledgement the peer keeps its sent
// bytes for (see session.go): it rides on every record, and a record with no payload
// carries it alone. The header's own CRC is checked before its length or count is
// believed: a length corrupted on the way would have the reader wait for bytes the
// writer never sends, a count would release bytes the peer still needs.
//
// End-to-end checksums (GONCCL_CHECKSUM): the payload's CRC32C is set and checked, so
// that a frame a NIC, a switch or a middlebox corrupted in a way TCP's 16-bit checksum
// misses is caught before any of it reaches a link. A reader hands out a record's
// bytes only once the whole record has matched; a record that does not match is a
// break like a reset: the session reconnects and the peer resends from this side's
// delivered count, the bad record included. After maxChecksumFails of them in a row
// (no record matched between them: the path corrupts what it carries, or the same
// bytes again), or at the first with no retry window, the session fails with
// ErrChecksum, naming the rank and the connection. Failures spread out are survived
// however many there are in all. Without checksums a reader hands out a record's bytes
// as they arrive.
//
// Records are at most 4 MiB (1 MiB with checksums): large enough that the header costs
// nothing, small enough that acknowledgements ride on a busy stream often and what is
// checked is still in the cache. CRC32C runs on the SSE4.2 instruction (hash/crc32 picks it).

// ErrChecksum means a record's bytes did not match their CRC32C: corrupted on the way.
var ErrChecksum = errors.New("frame checksum (CRC32C) mismatch")

const (
	sessRecordMax    = 4 << 20 // the most a record holds
	checkedRecordMax = 1 << 20 // the most a record with a CRC32C holds
	recordHeader     = 20
	maxChecksumFails = 16
	readAhead        = 16 << 10 // what a reader takes from the socket at once for headers
)

var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// putRecordHeader fills h for a record of n payload bytes carrying ack, whose payload
// CRC32C is crc (0 without checksums).
func putRecordHeader(h []byte, n int, ack uint64, crc uint32) {
	binary.LittleEndian.PutUint32(h[0:], uint32(n))
	binary.LittleEndian.PutUint64(h[4:], ack)
	binary.LittleEndian.PutUint32(h[12:], crc)
	binary.LittleEndian.PutUint32(h[16:], crc32.Checksum(h[:16], castagnoli()))
}

// parseRecordHeader checks h and returns its length, acknowledgement and payload CRC.
func parseRecordHeader(h []byte) (n int, ack uint64, crc uint32, err error) {
	if crc32.Checksum(h[:16], castagnoli()) != binary.LittleEndian.Uint32(h[16:]) {
		return 0, 0, 0, fmt.Errorf("%w: a record header", ErrChecksum)
	}
	n = int(binary.LittleEndian.Uint32(h[0:]))
	if n > sessRecordMax {
		return 0, 0, 0, fmt.Errorf("%w: a record header says %d bytes", ErrChecksum, n)
	}
	return n, binary.LittleEndian.Uint64(h[4:]), binary.LittleEndian.Uint32(h[12:]), nil
}

// recordWriter is what writing records needs between calls, so that nothing is
// allocated per record.
type recordWriter struct {
	hdr  [recordHeader]byte
	iov  [][]byte
	bufs net.Buffers
	flat []byte // header and payload in one buffer, for connections without writev
}

// writeRecords writes the stream bytes in pieces (in order) to c as records, each
// header carrying ack(), and returns how many payload bytes went out. s.writeMu held.
func (s *Session) writeRecords(c net.Conn, pieces [][]byte, ack func() uint64) (int, error) {
	w := &s.wr
	done := 0
	for len(pieces) > 0 {
		// Gather up to a record's worth of the pieces.
		w.iov = append(w.iov[:0], w.hdr[:])
		n, most := 0, sessRecordMax
		if s.cfg.Checksum {
			most = checkedRecordMax
		}
		for len(pieces) > 0 && n < most {
			if s.cfg.Checksum && n > 0 {
				// A piece starts a record of its own: a reader that asks for a frame's
				// header apart from its payload then gets each record whole, straight
				// into its buffer, instead of a copy of a record it must check first.
				break
			}
			p := pieces[0]
			k := min(len(p), most-n)
			if k > 0 {
				w.iov = append(w.iov, p[:k])
				n += k
			}
			if k == len(p) {
				pieces = pieces[1:]
			} else {
				pieces[0] = p[k:]
			}
		}
		if n == 0 {
			continue
		}
		var crc uint32
		if s.cfg.Checksum {
			for _, p := range w.iov[1:] {
				crc = crc32.Update(crc, castagnoli(), p)
			}
		}
		putRecordHeader(w.hdr[:], n, ack(), crc)
		var wrote int64
		var err error
		if _, ok := c.(*net.TCPConn); ok || n > 16<<10 {
			w.bufs = w.iov
			wrote, err = w.bufs.WriteTo(c)
			clear(w.iov)
		} else { // TLS: one record of its own for header and a short payload
			w.flat = w.flat[:0]
			for _, p := range w.iov {
				w.flat = append(w.flat, p...)
			}
			var k int
			k, err = c.Write(w.flat)
			wrote = int64(k)
		}
		out := max(0, int(wrote)-recordHeader)
		done += out
		if err != nil {
			if wrote > 0 && out < n && isTimeout(err) {
				// A record cut short by the caller's deadline leaves the stream in the
				// middle of a record: only a new connection can go on from here.
				err = &partialRecord{err}
			}
			return done, err
		}
	}
	return done, nil
}

// partialRecord is a write deadline that passed in the middle of a record: the
// caller's timeout, and a break of the connection.
type partialRecord struct{ err error }

func (e *partialRecord) Error() string { return e.err.Error() + " (in the middle of a record)" }
func (e *partialRecord) Unwrap() error { return e.err }

// recordReader is the state of the records being read.
type recordReader struct {
	buf     []byte // read ahead from the connection: buf[i:j] not yet parsed or handed out
	i, j    int
	left    int    // payload bytes of the current record not yet read
	n       int    // the current record's length
	want    uint32 // its payload CRC (checksums)
	rec     []byte // checksums: the record's payload read so far, where it is buffered
	checked []byte // checksums: matched bytes not yet handed out
	full    []byte // checksums: the buffer checked is in
	spare   []byte // checksums: a drained record's buffer, for the next
	gen     uint64 // the connection these are of
}

// on starts reading connection gen: records start afresh on a new connection.
func (r *recordReader) on(gen uint64) {
	if r.gen != gen {
		*r = recordReader{buf: r.buf, spare: r.spare, gen: gen}
	}
}

func (r *recordReader) buffered() int { return r.j - r.i }

// take moves up to len(p) read-ahead bytes into p.
func (r *recordReader) take(p []byte) int {
	n := copy(p, r.buf[r.i:r.j])
	r.i += n
	if r.i == r.j {
		r.i, r.j = 0, 0
	}
	return n
}

// readHeader reads the next record header from c (blocking until one is in), hands
// its acknowledgement to the session, and starts the record. Empty records (an
// acknowledgement alone) are taken whole.
func (s *Session) readHeader(c net.Conn) error {
	r := &s.rd
	if r.buf == nil {
		r.buf = make([]byte, readAhead)
	}
	for r.buffered() < recordHeader {
		if r.i > 0 {
			r.j = copy(r.buf, r.buf[r.i:r.j])
			r.i = 0
		}
		k, err := c.Read(r.buf[r.j:])
		r.j += k
		if err != nil && r.buffered() < recordHeader {
			return err
		}
	}
	n, ack, crc, err := parseRecordHeader(r.buf[r.i : r.i+recordHeader])
	if err != nil {
		return err
	}
	r.i += recordHeader
	if r.i == r.j {
		r.i, r.j = 0, 0
	}
	if err := s.gotAck(ack); err != nil {
		return err
	}
	r.n, r.left, r.want = n, n, crc
	return nil
}

// readFrom reads from c into p the payload bytes of records: as they arrive without
// checksums; with them, bytes of whole records that matched their CRC32C.
func (s *Session) readFrom(c net.Conn, p []byte) (int, error) {
	r := &s.rd
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(r.checked) > 0 {
			n := copy(p, r.checked)
			r.checked = r.checked[n:]
			if len(r.checked) == 0 {
				r.spare, r.full, r.checked = r.full[:0], nil, nil // the next record's buffer
			}
			return n, nil
		}
		if r.left == 0 {
			if err := s.readHeader(c); err != nil {
				return 0, err
			}
			continue
		}
		if !s.cfg.Checksum {
			k := min(len(p), r.left)
			if r.buffered() > 0 {
				n := r.take(p[:k])
				r.left -= n
				return n, nil
			}
			n, err := c.Read(p[:k])
			r.left -= n
			return n, err
		}
		if len(r.rec) == 0 && len(p) >= r.left { // the whole record straight into p
			k := r.take(p[:min(r.left, r.buffered())])
			got, err := io.ReadFull(c, p[k:r.left])
			if err != nil {
				r.rec = append(r.rec, p[:k+got]...) // go on from there after a timeout
				r.left -= k + got
				return 0, err
			}
			if crc32.Checksum(p[:r.n], castagnoli()) != r.want {
				return 0, ErrChecksum
			}
			n := r.n
			r.left = 0
			return n, nil
		}
		for r.left > 0 {
			if r.buffered() > 0 {
				k := min(r.left, r.buffered())
				r.rec = append(r.rec, r.buf[r.i:r.i+k]...)
				r.i += k
				r.left -= k
				continue
			}
			if cap(r.rec) < r.n {
				if cap(r.spare) >= r.n {
					r.rec, r.spare = append(r.spare[:0], r.rec...), nil
				} else {
					r.rec = append(make([]byte, 0, r.n), r.rec...)
				}
			}
			k, err := c.Read(r.rec[len(r.rec) : len(r.rec)+r.left])
			r.rec = r.rec[:len(r.rec)+k]
			r.left -= k
			if err != nil {
				return 0, err
			}
		}
		if crc32.Checksum(r.rec, castagnoli()) != r.want {
			return 0, ErrChecksum
		}
		r.checked, r.full, r.rec = r.rec, r.rec, nil
	}
}
