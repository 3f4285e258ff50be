package transport

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// The fuzz targets feed arbitrary bytes, as a malicious or broken peer could send
// them, to each decoder and receive path. None may panic, block past its deadline,
// or allocate according to a length read from the wire.

// feed returns one end of a pipe whose other end writes data, then closes, and
// discards whatever the tested side writes back.
func feed(data []byte) net.Conn {
	a, b := net.Pipe()
	go func() {
		_, _ = b.Write(data)
		b.Close()
	}()
	go func() { _, _ = io.Copy(io.Discard, b) }()
	return a
}

// frame encodes one collective frame with payload p.
func frame(h Header, p []byte) []byte {
	b := make([]byte, HeaderSize+len(p))
	EncodeHeader(b, &h, uint32(len(p)))
	copy(b[HeaderSize:], p)
	return b
}

var seedHeader = Header{Seq: 3, Kind: 1, DType: 7, Op: 0, Algo: 1, Root: -1, Count: 16, Offset: 0}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(frame(seedHeader, nil)[:HeaderSize])
	f.Add(make([]byte, HeaderSize))
	huge := seedHeader
	huge.Count, huge.Offset = ^uint64(0), ^uint64(0)
	f.Add(frame(huge, nil)[:HeaderSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < HeaderSize {
			return
		}
		h, err := DecodeHeader(b)
		if err != nil {
			return
		}
		// What decodes re-encodes to the same bytes (the reserved word aside).
		out := make([]byte, HeaderSize)
		EncodeHeader(out, &h, h.Len)
		if !bytes.Equal(out[:40], b[:40]) || !bytes.Equal(out[44:], b[44:HeaderSize]) {
			t.Fatalf("header %+v re-encodes to %x, decoded from %x", h, out, b[:HeaderSize])
		}
	})
}

// recvSize is the payload the fuzzed StreamLink receive expects.
const recvSize = 64

func FuzzStreamLinkRecv(f *testing.F) {
	want := seedHeader
	want.Len = recvSize
	good := frame(want, bytes.Repeat([]byte{7}, recvSize))
	f.Add(good)
	f.Add(good[:HeaderSize])                   // payload missing
	f.Add(good[:HeaderSize/2])                 // header truncated
	f.Add(frame(want, make([]byte, 3)))        // shorter payload than announced
	f.Add(append(good[:0:0], good[1:]...))     // out of step by one byte
	f.Add(frame(Header{Kind: 9, Seq: 3}, nil)) // another operation
	lie := append([]byte(nil), good...)
	lie[20], lie[21], lie[22], lie[23] = 0xff, 0xff, 0xff, 0xff // 4 GiB announced
	f.Add(lie)
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := feed(data)
		l := NewStreamLink(1, conn)
		defer l.Close()
		buf := make([]byte, recvSize)
		start := time.Now()
		err := l.Recv(&want, buf, start.Add(2*time.Second))
		if time.Since(start) > 2*time.Second+500*time.Millisecond {
			t.Fatalf("Recv took %v, past its deadline", time.Since(start))
		}
		if err == nil {
			if len(data) < HeaderSize+recvSize {
				t.Fatalf("Recv succeeded on %d bytes", len(data))
			}
			got, _ := DecodeHeader(data)
			if got != want {
				t.Fatalf("Recv accepted header %+v, want %+v", got, want)
			}
			return
		}
		if !errors.Is(err, ErrPeerClosed) && !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrTimeout) &&
			!bytes.Contains([]byte(err.Error()), []byte("bad frame magic")) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}

func msgFrame(h MsgHeader, p []byte) []byte {
	b := make([]byte, MsgHeaderSize+len(p))
	EncodeMsgHeader(b, &h)
	copy(b[MsgHeaderSize:], p)
	return b
}

// maxPayload is the largest payload the fuzzed reader accepts, like the eager limit
// the point-to-point engine applies.
const maxPayload = 1 << 16

func FuzzMsgConn(f *testing.F) {
	eager := msgFrame(MsgHeader{Kind: MsgEager, DType: 7, Seq: 1, Tag: 5, Len: 8}, make([]byte, 8))
	f.Add(eager)
	f.Add(append(msgFrame(MsgHeader{Kind: MsgRTS, Seq: 2, Len: 1 << 20}, nil),
		msgFrame(MsgHeader{Kind: MsgData, Seq: 2, Len: 4}, []byte{1, 2, 3, 4})...))
	f.Add(eager[:MsgHeaderSize+3])
	f.Add(msgFrame(MsgHeader{Kind: MsgEager, Seq: 1, Len: ^uint64(0)}, nil))
	f.Add(msgFrame(MsgHeader{Kind: MsgCTS, Seq: 9}, nil))
	f.Add(msgFrame(MsgHeader{Kind: 200, Seq: 9}, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := NewMsgConn(1, feed(data))
		defer m.Close()
		var buf [maxPayload]byte
		for frames := 0; ; frames++ {
			if frames > len(data)/MsgHeaderSize {
				t.Fatalf("read %d frames from %d bytes", frames, len(data))
			}
			h, err := m.ReadHeader()
			if err != nil {
				return
			}
			if h.Kind < MsgEager || h.Kind > msgKindMax || h.Len > MaxMsgLen {
				t.Fatalf("decoded an invalid header %+v", h)
			}
			if !h.HasPayload() {
				continue
			}
			dl := time.Now().Add(2 * time.Second)
			if h.Len > maxPayload {
				err = m.Discard(h.Len, dl)
			} else {
				err = m.ReadPayload(buf[:h.Len], dl)
			}
			if err != nil {
				return
			}
		}
	})
}
