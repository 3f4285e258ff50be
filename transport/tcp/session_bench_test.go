package tcp

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkLink64MiB moves 64 MiB frames one way over loopback TCP: over the bare
// connection, over a session (the ring's copy of each write's tail), and over a
// session with CRC32C records (GONCCL_CHECKSUM). The ratios of one run are the cost
// of resumable links and of checksums.
func BenchmarkLink64MiB(b *testing.B) {
	for _, v := range []struct {
		name              string
		session, checksum bool
	}{{"bare", false, false}, {"session", true, false}, {"checksum", true, true}} {
		b.Run(v.name, func(b *testing.B) {
			var w, r net.Conn
			if v.session {
				dial, acc, _, _ := sessionPairWith(b, sessOpts{retry: 5 * time.Second, checksum: v.checksum}, nil, nil)
				w, r = dial, acc
				b.Cleanup(func() { dial.Close(); acc.Close() })
			} else {
				a, c := tcpConns(&testing.T{}, 1)
				tune(a[0].(*net.TCPConn))
				tune(c[0].(*net.TCPConn))
				w, r = a[0], c[0]
				b.Cleanup(func() { a[0].Close(); c[0].Close() })
			}
			src, dst := make([]byte, 64<<20), make([]byte, 64<<20)
			done := make(chan error, 1)
			b.SetBytes(int64(len(src)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				go func() { _, err := w.Write(src); done <- err }()
				if _, err := io.ReadFull(r, dst); err != nil {
					b.Fatal(err)
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
