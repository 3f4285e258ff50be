package tcp

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// A link that goes quiet (a switch reboots, a cable is pulled: packets are dropped and
// nothing is reset) gives no error by itself: TCP retransmits with a backoff that
// doubles up to minutes, keepalive does nothing while data is unacknowledged, and a
// blocked write waits for its caller's deadline. A QuietWatch looks at each session's
// connection every little while (TCP_INFO) and breaks it when bytes have been
// outstanding, with no progress and no acknowledgement of any kind arriving, for
// QuietTimeout: the session then reconnects within its retry window, as after a reset.
//
// TCP_USER_TIMEOUT would do the first half, but Linux applies it to window probes too:
// a peer that simply reads nothing for that long (a rank still computing) would break
// the connection, again and again. Here a peer that answers probes is not quiet.
//
// A write that times out on a deadline that is not its caller's is a break as well
// (callersTimeout): crypto/tls reports the first timeout of a write on every later one.

// ErrQuiet is the cause of a break a QuietWatch made.
var ErrQuiet = errors.New("the link went quiet")

// QuietTimeout is how long bytes a session sent may stay unacknowledged, with nothing
// at all arriving from the peer, before its connection counts as broken, for retry
// window retry: a quarter of the window, between 2 s (a loaded host's retransmissions
// are not a break) and 10 s, so that the reconnect has most of the window.
func QuietTimeout(retry time.Duration) time.Duration {
	return min(max(retry/4, 2*time.Second), 10*time.Second)
}

// QuietWatch breaks the connections of sessions that went quiet (see above). Its
// methods are for one goroutine.
type QuietWatch struct {
	d     time.Duration
	marks map[*Session]quietMark
}

// NewQuietWatch returns a watch that breaks a connection quiet for d.
func NewQuietWatch(d time.Duration) *QuietWatch {
	return &QuietWatch{d: d, marks: map[*Session]quietMark{}}
}

// Check looks once at each of ss (every session it watches: call it every d/4 or so)
// and breaks the connections that went quiet; it returns how many it broke. Once one
// connection to a peer is found quiet, every connection to that peer on which nothing
// has arrived for d breaks with it: one whose peer had closed its window (a slow
// reader) shows no bytes in flight, only window probes, and would otherwise wait for
// the next probe, minutes apart at worst, after the network came back.
func (w *QuietWatch) Check(ss []*Session, now time.Time) int {
	type look struct {
		s   *Session
		gen uint64
		x   tcpSample
	}
	var looks []look
	quietPeers := map[int]bool{}
	seen := make(map[*Session]bool, len(ss))
	for _, s := range ss {
		seen[s] = true
		s.mu.Lock()
		c, gen, live := s.conn, s.gen, !s.down && s.err == nil && !s.closed && s.cfg.Retry > 0
		s.mu.Unlock()
		x, ok := sample(c)
		if !live || !ok {
			delete(w.marks, s)
			continue
		}
		looks = append(looks, look{s, gen, x})
		m, q := quiet(w.marks[s], c, x, now, w.d)
		w.marks[s] = m
		if q {
			quietPeers[s.cfg.Peer] = true
		}
	}
	for s := range w.marks {
		if !seen[s] {
			delete(w.marks, s)
		}
	}
	broke := 0
	for _, l := range looks {
		if !quietPeers[l.s.cfg.Peer] || l.x.lastAck < w.d {
			continue
		}
		delete(w.marks, l.s)
		l.s.mu.Lock()
		l.s.breakLocked(l.gen, fmt.Errorf("%w: nothing has arrived for %v while bytes to rank %d wait for an acknowledgement", ErrQuiet, l.x.lastAck.Round(time.Millisecond), l.s.cfg.Peer))
		l.s.mu.Unlock()
		broke++
	}
	return broke
}

// quietMark is what a watch last saw of a session: its connection, and since when
// bytes have been outstanding on it with no progress (zero: none are).
type quietMark struct {
	conn  net.Conn
	acked uint64 // the connection's acknowledged bytes then
	since time.Time
}

// tcpSample is what TCP_INFO says of a connection.
type tcpSample struct {
	outstanding bool          // bytes to deliver and no sign of the peer taking them
	acked       uint64        // bytes acknowledged so far
	lastAck     time.Duration // since anything at all (an ACK) arrived
}

// quiet decides, from a new sample x of connection c at now and the previous mark m,
// whether c is quiet: bytes outstanding with no progress for at least d by this watch's
// samples, and nothing heard for at least d by the kernel's clock.
func quiet(m quietMark, c net.Conn, x tcpSample, now time.Time, d time.Duration) (quietMark, bool) {
	switch {
	case !x.outstanding:
		return quietMark{conn: c}, false
	case m.conn != c || m.since.IsZero() || x.acked != m.acked:
		return quietMark{conn: c, acked: x.acked, since: now}, false
	}
	return m, now.Sub(m.since) >= d && x.lastAck >= d
}

// sample reads c's TCP_INFO (false: c is no TCP connection, or closed).
func sample(c net.Conn) (tcpSample, bool) {
	tc := rawTCP(c)
	if tc == nil {
		return tcpSample{}, false
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return tcpSample{}, false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := sc.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return tcpSample{}, false
	}
	return tcpSample{
		// Bytes in flight, or bytes waiting while the peer's window is open and nothing is
		// in flight: the kernel cannot send them (this host's interface is down).
		outstanding: info.Unacked > 0 || info.Notsent_bytes > 0 && info.Snd_wnd > 0,
		acked:       info.Bytes_acked,
		lastAck:     time.Duration(info.Last_ack_recv) * time.Millisecond,
	}, true
}

// callersTimeout reports whether err is the caller's deadline dl passing: a timeout
// where dl is unset or still ahead is the connection's own (a break).
func callersTimeout(err error, dl time.Time) bool {
	return isTimeout(err) && !dl.IsZero() && !time.Now().Before(dl)
}
