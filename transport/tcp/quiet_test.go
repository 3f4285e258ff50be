package tcp

import (
	"bytes"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTimedOutTLSWriteIsABreakAfterwards: a write whose caller's deadline passes (the
// peer reads nothing) returns the timeout, as it must; crypto/tls then reports that
// timeout on every later write, whatever its deadline. Such a write is the
// connection's failure, not the caller's: the session reconnects, and the bytes
// arrive once and in order.
func TestTimedOutTLSWriteIsABreakAfterwards(t *testing.T) {
	_, secs := groupTLS(t, 2)
	dial, acc, _, _ := sessionPair(t, 5*time.Second, secs[0], secs[1])
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB: more than the socket buffers hold
	require.NoError(t, dial.SetWriteDeadline(time.Now().Add(200*time.Millisecond)))
	n, err := dial.Write(big)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the caller's deadline")
	require.Less(t, n, len(big))

	got := make(chan []byte, 1)
	go func() {
		_ = acc.SetReadDeadline(time.Now().Add(20 * time.Second))
		b := make([]byte, n+5)
		_, err := io.ReadFull(acc, b)
		if err != nil {
			b = nil
		}
		got <- b
	}()
	require.NoError(t, dial.SetWriteDeadline(time.Now().Add(10*time.Second)))
	_, err = dial.Write([]byte("after"))
	require.NoError(t, err, "a write with its deadline ahead")
	b := <-got
	require.NotNil(t, b, "the acceptor did not read the stream")
	require.Equal(t, big[:n], b[:n])
	require.Equal(t, "after", string(b[n:]))
	require.Positive(t, dial.Resumes())
}

func TestQuietTimeout(t *testing.T) {
	for _, c := range []struct{ retry, want time.Duration }{
		{time.Second, 2 * time.Second}, {10 * time.Second, 2500 * time.Millisecond},
		{20 * time.Second, 5 * time.Second}, {time.Minute, 10 * time.Second},
	} {
		require.Equal(t, c.want, QuietTimeout(c.retry), "retry %v", c.retry)
	}
}

// TestQuietDecision: a connection is quiet when bytes stayed outstanding with no
// progress for d by the watch's samples and nothing arrived for d by the kernel's.
func TestQuietDecision(t *testing.T) {
	a, b := &net.TCPConn{}, &net.TCPConn{}
	t0 := time.Unix(1000, 0)
	d := 2 * time.Second
	out := func(acked uint64, lastAck time.Duration) tcpSample {
		return tcpSample{outstanding: true, acked: acked, lastAck: lastAck}
	}
	steps := []struct {
		name  string
		c     net.Conn
		x     tcpSample
		at    time.Duration
		quiet bool
	}{
		{"idle", a, tcpSample{acked: 10, lastAck: time.Minute}, 0, false},
		{"bytes out: the wait starts", a, out(10, 0), 0, false},
		{"no progress, but not for d", a, out(10, time.Second), time.Second, false},
		{"no progress for d, nothing heard for d", a, out(10, 2*time.Second), 2 * time.Second, true},
		{"progress: the wait starts again", a, out(20, 3*time.Second), 3 * time.Second, false},
		{"no progress for d, but something heard (a probe's answer)", a, out(20, time.Second), 5 * time.Second, false},
		{"nothing heard for long, the wait just began again", b, out(20, time.Minute), 6 * time.Second, false},
		{"new connection, no progress for d", b, out(20, time.Minute), 8 * time.Second, true},
	}
	var m quietMark
	for _, st := range steps {
		var q bool
		m, q = quiet(m, st.c, st.x, t0.Add(st.at), d)
		require.Equal(t, st.quiet, q, st.name)
	}
}

// TestQuietWatchSparesBusyLinks: a watch with a short timeout, run often over a pair of
// sessions streaming both ways, never breaks them.
func TestQuietWatchSparesBusyLinks(t *testing.T) {
	dial, acc, _, _ := sessionPair(t, 5*time.Second, nil, nil)
	w := NewQuietWatch(300 * time.Millisecond)
	stop := make(chan struct{})
	done := make(chan int)
	go func() {
		broke := 0
		for {
			select {
			case <-stop:
				done <- broke
				return
			case now := <-time.After(20 * time.Millisecond):
				broke += w.Check([]*Session{dial, acc}, now)
			}
		}
	}()
	pump(t, dial, acc, 32<<20, nil)
	close(stop)
	require.Zero(t, <-done)
	require.Zero(t, dial.Resumes())
}

// TestQuietWatchSparesASlowReader: a peer that reads nothing for longer than the
// watch's timeout (its window closed, its kernel answering probes) is not a quiet link:
// no break, and the bytes arrive once it reads.
func TestQuietWatchSparesASlowReader(t *testing.T) {
	dial, acc, _, _ := sessionPair(t, 5*time.Second, nil, nil)
	w := NewQuietWatch(500 * time.Millisecond)
	big := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB: the writer blocks
	done := make(chan error, 1)
	go func() {
		_ = dial.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, err := dial.Write(big)
		done <- err
	}()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		require.Zero(t, w.Check([]*Session{dial, acc}, time.Now()), "a slow reader was taken for a quiet link")
	}
	_ = acc.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, len(big))
	_, err := io.ReadFull(acc, got)
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.True(t, bytes.Equal(big, got))
	require.Zero(t, dial.Resumes())
}
