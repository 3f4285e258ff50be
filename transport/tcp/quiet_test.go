package tcp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
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

// TestWatchQuietSetsUserTimeout: the option reaches the socket under a TLS connection.
func TestWatchQuietSetsUserTimeout(t *testing.T) {
	_, secs := groupTLS(t, 2)
	dial, _, _, _ := sessionPair(t, 5*time.Second, secs[0], secs[1])
	WatchQuiet(dial.Conn(), 3*time.Second)
	sc, err := rawTCP(dial.Conn()).SyscallConn()
	require.NoError(t, err)
	v := 0
	require.NoError(t, sc.Control(func(fd uintptr) {
		v, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}))
	require.NoError(t, err)
	require.Equal(t, 3000, v)
	require.False(t, callersTimeout(syscall.ETIMEDOUT, time.Now().Add(-time.Second)), "TCP_USER_TIMEOUT's error is a break")
	require.False(t, callersTimeout(os.ErrDeadlineExceeded, time.Time{}))
	require.True(t, callersTimeout(&net.OpError{Err: os.ErrDeadlineExceeded}, time.Now().Add(-time.Second)))
	require.False(t, callersTimeout(errors.New("x"), time.Now().Add(-time.Second)))
}
