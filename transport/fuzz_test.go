package transport

import (
	"bytes"
	"testing"
	"time"

	"github.com/gonccl/gonccl/internal/wiretest"
)

// The fuzz targets feed arbitrary bytes, as a malicious or broken peer could send
// them, to each decoder and receive path. None may panic, block past its deadline,
// or allocate according to a length read from the wire.

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
		m := NewMsgConn(1, wiretest.Feed(data))
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
