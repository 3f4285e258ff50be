package tcp

import (
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gonccl/gonccl/transport"

	"github.com/stretchr/testify/require"
)

// BenchmarkLinkFrames moves frames of 1 MiB and 64 MiB one way over loopback TCP, as
// a collective does: a StreamLink sends each frame without a copy (SendKept) and
// settles it (as an operation ends), the peer receives it and answers with an empty
// frame. Over the bare connection, over a session (resumable: kept by reference,
// acknowledgements in record headers), and over a session with CRC32C records
// (GONCCL_CHECKSUM). The ratios of one run are the cost of resumable links and of
// checksums in a warm steady state: the same session carries every frame.
//
//	go test ./transport/tcp -run '^$' -bench LinkFrames -count 5
func BenchmarkLinkFrames(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		src, dst := make([]byte, size), make([]byte, size)
		for _, v := range []struct {
			name              string
			session, checksum bool
		}{{"bare", false, false}, {"session", true, false}, {"checksum", true, true}} {
			b.Run(fmt.Sprintf("%dMiB/%s", size>>20, v.name), func(b *testing.B) {
				var w, r net.Conn
				if v.session {
					dial, acc, _, _ := sessionPairWith(b, sessOpts{retry: 5 * time.Second, checksum: v.checksum}, nil, nil)
					w, r = dial, acc
				} else {
					a, c := tcpConns(&testing.T{}, 1)
					tune(a[0].(*net.TCPConn))
					tune(c[0].(*net.TCPConn))
					w, r = a[0], c[0]
					b.Cleanup(func() { a[0].Close(); c[0].Close() })
				}
				lw, lr := NewStreamLink(1, w), NewStreamLink(0, r)
				done := make(chan error, 1)
				h := transport.Header{Kind: 1, Root: -1}
				dl := time.Now().Add(time.Hour)
				frame := func() error {
					h.Seq++
					go func() {
						hh := h
						if err := lr.Recv(&hh, dst, dl); err != nil {
							done <- err
							return
						}
						done <- lr.Send(&hh, nil, dl)
					}()
					if err := lw.SendKept(&h, src, dl); err != nil {
						return err
					}
					hh := h
					if err := lw.Recv(&hh, nil, dl); err != nil {
						return err
					}
					if err := lw.Settle(dl); err != nil {
						return err
					}
					return <-done
				}
				for i := 0; i < 3; i++ { // warm: the session's buffers and the socket's window
					if err := frame(); err != nil {
						b.Fatal(err)
					}
				}
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := frame(); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if v.session {
					now, peak := RetainedBytes()
					b.ReportMetric(float64(peak), "peak-copied-B")
					_ = now
				}
			})
		}
	}
}

// TestLinkCostAcrossHosts measures what BenchmarkLink64MiB does between two hosts:
// run it with GONCCL_XHOST=accept:ADDR on one (it serves until killed) and
// GONCCL_XHOST=dial:ADDR on the other, which prints each variant's time per 64 MiB
// frame, interleaved over rounds, and the ratios to the bare connection (same run).
// Skipped otherwise. On the two hosts of scripts/two-hosts.sh:
//
//	ip netns exec gonccl2h0 ./tcp.test -test.run TestLinkCostAcrossHosts &  (GONCCL_XHOST=accept:10.77.0.1:7077)
//	ip netns exec gonccl2h1 ./tcp.test -test.run TestLinkCostAcrossHosts -test.v (GONCCL_XHOST=dial:10.77.0.1:7077)
func TestLinkCostAcrossHosts(t *testing.T) {
	role, addr, ok := strings.Cut(os.Getenv("GONCCL_XHOST"), ":")
	if !ok {
		t.Skip("set GONCCL_XHOST=accept:ADDR or dial:ADDR (see the comment)")
	}
	const frame, frames = 64 << 20, 4
	buf := make([]byte, frame)
	if role == "accept" {
		la, err := net.ResolveTCPAddr("tcp", addr)
		require.NoError(t, err)
		l, err := net.ListenTCP("tcp", la)
		require.NoError(t, err)
		for {
			raw, err := l.AcceptTCP()
			require.NoError(t, err)
			Accepted(raw)
			c, h, err := Accept(raw, tlsSecret, nil, time.Now().Add(10*time.Second))
			require.NoError(t, err)
			if h.Link != 0 {
				c = NewSession(c, SessionConfig{Peer: h.From, Link: h.Link, Retry: time.Second, Checksum: h.Checksum, Log: func(string) {}})
			}
			for i := 0; i < frames; i++ {
				_, err = io.ReadFull(c, buf)
				require.NoError(t, err)
				_, err = c.Write(buf[:1])
				require.NoError(t, err)
			}
			c.Close()
		}
	}
	names := []string{"bare", "session", "checksum"}
	took := map[string][]time.Duration{}
	for round := 0; round < 5; round++ {
		for i, name := range names {
			h := Hello{From: 1, To: 0, Link: uint64(i), Checksum: i == 2}
			c, err := DialOnce(addr, tlsSecret, nil, h, time.Now().Add(10*time.Second))
			require.NoError(t, err)
			if h.Link != 0 {
				c = NewSession(c, SessionConfig{Peer: 0, Link: h.Link, Retry: time.Second, Checksum: h.Checksum, Log: func(string) {}})
			}
			start := time.Now()
			for f := 0; f < frames; f++ {
				_, err = c.Write(buf)
				require.NoError(t, err)
				_, err = io.ReadFull(c, buf[:1])
				require.NoError(t, err)
			}
			took[name] = append(took[name], time.Since(start)/frames)
			c.Close()
		}
	}
	med := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	for _, name := range names {
		t.Logf("%-8s median %v per 64 MiB frame (%.2fx bare); rounds %v", name, med(took[name]).Round(time.Microsecond),
			float64(med(took[name]))/float64(med(took["bare"])), took[name])
	}
}
