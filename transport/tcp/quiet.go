package tcp

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// A link that goes quiet (a switch reboots, a cable is pulled: packets are dropped and
// nothing is reset) gives no error by itself: TCP retransmits with a backoff that
// doubles up to minutes, keepalive does nothing while data is unacknowledged, and a
// blocked write waits for its caller's deadline. So a session's connection has a user
// timeout (TCP_USER_TIMEOUT): bytes unacknowledged for QuietTimeout fail the
// connection (ETIMEDOUT), which the session takes as a break and reconnects within its
// retry window, and a write that times out on a deadline that is not its caller's
// (crypto/tls reports the first timeout of a write on every later one) is a break too.

// QuietTimeout is how long bytes a session sent may stay unacknowledged before its
// connection counts as broken, for retry window retry: a quarter of the window,
// between 2 s (a loaded host's retransmissions are not a break) and 10 s, so that the
// reconnect has most of the window.
func QuietTimeout(retry time.Duration) time.Duration {
	return min(max(retry/4, 2*time.Second), 10*time.Second)
}

// WatchQuiet gives c, a session's connection (plain or TLS), a user timeout of d.
func WatchQuiet(c net.Conn, d time.Duration) {
	tc := rawTCP(c)
	if tc == nil {
		return
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = sc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	})
}

// callersTimeout reports whether err is the caller's deadline dl passing: a timeout
// where dl is unset or still ahead is the connection's own (a break).
func callersTimeout(err error, dl time.Time) bool {
	return isTimeout(err) && !dl.IsZero() && !time.Now().Before(dl)
}
