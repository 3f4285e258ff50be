package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gonccl/gonccl/internal/wiretest"
	"github.com/gonccl/gonccl/transport"
)

func hello(from, to int32, ch uint32, version uint32) []byte {
	b := make([]byte, helloSize)
	binary.LittleEndian.PutUint32(b[0:], helloMagic)
	binary.LittleEndian.PutUint32(b[4:], version)
	binary.LittleEndian.PutUint32(b[8:], uint32(from))
	binary.LittleEndian.PutUint32(b[12:], uint32(to))
	binary.LittleEndian.PutUint32(b[16:], ch)
	for i := 20; i < helloSize; i++ {
		b[i] = byte(i)
	}
	putResume(b[24:], Hello{})
	return b
}

// resumeHello is hello with the session fields of a reconnect of link.
func resumeHello(from, to int32, ch uint32, link, count uint64) []byte {
	b := hello(from, to, ch, protoVersion)
	putResume(b[24:], Hello{Link: link, Resume: true, Count: count})
	return b
}

// FuzzAcceptHandshake feeds arbitrary bytes to the accepting side of the handshake: it
// must refuse them (nobody without the secret can answer its fresh nonce), promptly,
// and without panicking.
func FuzzAcceptHandshake(f *testing.F) {
	good := hello(1, 0, ChannelColl, protoVersion)
	f.Add(good)
	f.Add(append(append([]byte(nil), good...), make([]byte, macSize)...)) // hello + a wrong proof
	f.Add(good[:7])                                                       // truncated
	f.Add(hello(-1, -1, 0xffffffff, protoVersion))                        // bad channel
	f.Add(hello(1, 0, ChannelP2P, 99))                                    // other protocol
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Add(resumeHello(1, 0, ChannelColl, 7, 1<<40))                               // a reconnect
	f.Add(append(resumeHello(0, 1, ChannelCall, 7, 3), make([]byte, macSize)...)) // a call, wrong proof
	secret := []byte("0123456789abcdef")
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := wiretest.Feed(data)
		defer conn.Close()
		start := time.Now()
		h, err := AcceptHandshake(conn, secret, start.Add(2*time.Second))
		if err == nil {
			t.Fatalf("accepted %+v from %d arbitrary bytes", h, len(data))
		}
		if took := time.Since(start); took > 2*time.Second+hangSlack {
			t.Fatalf("handshake took %v, past its deadline", took)
		}
	})
}

// frame encodes one collective frame with payload p.
func frame(h transport.Header, p []byte) []byte {
	b := make([]byte, transport.HeaderSize+len(p))
	transport.EncodeHeader(b, &h, uint32(len(p)))
	copy(b[transport.HeaderSize:], p)
	return b
}

// hangSlack is how far past its 2 s deadline a fuzzed call may return before it counts
// as blocking past it. The point is a call that never returns (which the fuzzer's own
// timeout would report much later), not speed: on a loaded 2-core CI machine a Recv
// whose deadline had passed returned 1.2 s late (2026-11-27), so 500 ms was too tight.
const hangSlack = 8 * time.Second

// recvSize is the payload the fuzzed StreamLink receive expects.
const recvSize = 64

func FuzzStreamLinkRecv(f *testing.F) {
	want := transport.Header{Seq: 3, Kind: 1, DType: 7, Op: 0, Algo: 1, Root: -1, Count: 16, Offset: 0}
	want.Len = recvSize
	good := frame(want, bytes.Repeat([]byte{7}, recvSize))
	f.Add(good)
	f.Add(good[:transport.HeaderSize])                   // payload missing
	f.Add(good[:transport.HeaderSize/2])                 // header truncated
	f.Add(frame(want, make([]byte, 3)))                  // shorter payload than announced
	f.Add(append(good[:0:0], good[1:]...))               // out of step by one byte
	f.Add(frame(transport.Header{Kind: 9, Seq: 3}, nil)) // another operation
	lie := append([]byte(nil), good...)
	lie[20], lie[21], lie[22], lie[23] = 0xff, 0xff, 0xff, 0xff // 4 GiB announced
	f.Add(lie)
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := wiretest.Feed(data)
		l := NewStreamLink(1, conn)
		defer l.Close()
		buf := make([]byte, recvSize)
		start := time.Now()
		err := l.Recv(&want, buf, start.Add(2*time.Second))
		if time.Since(start) > 2*time.Second+hangSlack {
			t.Fatalf("Recv took %v, past its deadline", time.Since(start))
		}
		if err == nil {
			if len(data) < transport.HeaderSize+recvSize {
				t.Fatalf("Recv succeeded on %d bytes", len(data))
			}
			got, _ := transport.DecodeHeader(data)
			if got != want {
				t.Fatalf("Recv accepted header %+v, want %+v", got, want)
			}
			return
		}
		if !errors.Is(err, transport.ErrPeerClosed) && !errors.Is(err, transport.ErrMismatch) &&
			!errors.Is(err, transport.ErrTimeout) && !bytes.Contains([]byte(err.Error()), []byte("bad frame magic")) {
			t.Fatalf("unexpected error class: %v", err)
		}
	})
}

// FuzzResumeAnswer feeds arbitrary bytes to a reconnecting dialler where the
// acceptor's answer belongs: it must take only a well-formed answer, read a refusal's
// reason without trusting its length beyond 255 bytes, return promptly and never
// panic. Only an answer whose MAC matches is taken.
func FuzzResumeAnswer(f *testing.F) {
	fuzzHello := Hello{Link: 7, Resume: true}
	ok := binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint32(nil, resumeMagic), 12345)
	ok = binary.LittleEndian.AppendUint64(ok, 3)
	ok = append(ok, answerMAC(tlsSecret, 'R', fuzzHello, 12345, 3)...)
	f.Add(ok)
	f.Add(ok[:7])
	f.Add(append(refuseMagic[:], 5, 's', 't', 'a', 'l', 'e'))
	f.Add(append(refuseMagic[:], 255, 'x'))
	f.Add([]byte("GET / HTTP/1.0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := wiretest.Feed(data)
		defer conn.Close()
		start := time.Now()
		n, gen, err := readAnswer(conn, tlsSecret, fuzzHello, 'R', start.Add(2*time.Second))
		if err == nil && (len(data) < answerSize || binary.LittleEndian.Uint32(data) != resumeMagic || binary.LittleEndian.Uint64(data[4:]) != n ||
			binary.LittleEndian.Uint64(data[12:]) != gen || !bytes.Equal(data[20:answerSize], answerMAC(tlsSecret, 'R', fuzzHello, n, gen))) {
			t.Fatalf("took %d from %q", n, data)
		}
		var refused *RefusedError
		if errors.As(err, &refused) && len(refused.Reason) > 255 {
			t.Fatalf("a reason of %d bytes", len(refused.Reason))
		}
		if took := time.Since(start); took > 2*time.Second+hangSlack {
			t.Fatalf("took %v, past its deadline", took)
		}
	})
}
