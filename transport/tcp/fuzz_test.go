package tcp

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"
)

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
	secret := []byte("0123456789abcdef")
	f.Fuzz(func(t *testing.T, data []byte) {
		conn := feed(data)
		defer conn.Close()
		start := time.Now()
		h, err := AcceptHandshake(conn, secret, start.Add(2*time.Second))
		if err == nil {
			t.Fatalf("accepted %+v from %d arbitrary bytes", h, len(data))
		}
		if took := time.Since(start); took > 2500*time.Millisecond {
			t.Fatalf("handshake took %v, past its deadline", took)
		}
	})
}
