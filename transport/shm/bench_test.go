package shm

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/tcp"
)

// tcpPair connects two StreamLinks over loopback TCP, tuned like gonccl's own sockets.
func tcpPair(b *testing.B) (*tcp.StreamLink, *tcp.StreamLink) {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(b, err)
	defer l.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, err := l.AcceptTCP()
		if err == nil {
			tcp.Accepted(c)
		}
		accepted <- c
	}()
	c, err := net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	require.NoError(b, err)
	tcp.Accepted(c)
	s := <-accepted
	require.NotNil(b, s)
	return tcp.NewStreamLink(1, c), tcp.NewStreamLink(0, s)
}

// benchLink streams b.N frames of n bytes from a to r and reports the throughput.
func benchLink(b *testing.B, s, r transport.Link, n int) {
	p := make([]byte, n)
	q := make([]byte, n)
	h := transport.Header{Root: -1}
	dl := time.Now().Add(10 * time.Minute)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	b.ResetTimer()
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			if err := s.Send(&h, p, dl); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := 0; i < b.N; i++ {
		if err := r.Recv(&h, q, dl); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkSendRecv(b *testing.B) {
	for _, n := range []int{1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("shm/%dMiB", n>>20), func(b *testing.B) {
			s, r := pair(b, DefaultRingSize)
			defer s.Close()
			defer r.Close()
			benchLink(b, s, r, n)
		})
		b.Run(fmt.Sprintf("tcp/%dMiB", n>>20), func(b *testing.B) {
			s, r := tcpPair(b)
			defer s.Close()
			defer r.Close()
			benchLink(b, s, r, n)
		})
	}
}
