package core

import (
	"bytes"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/internal/testtime"
)

// A rank's listener against strangers (handshakes.go): it keeps accepting when the
// process runs out of descriptors, and a flood of held and garbage connections neither
// grows without bound nor keeps a real peer's reconnect out.

// sessionResumes is how many times rank c's sessions have reconnected.
func sessionResumes(c *Comm) int {
	n := 0
	for p := range c.nranks {
		for _, s := range c.peers.sess.Sessions(p) {
			n += s.Resumes()
		}
	}
	return n
}

// requireAllReduceExact runs one float32 all_reduce of count on comms and checks it.
func requireAllReduceExact(t *testing.T, comms []*Comm, count int, seed int64) {
	t.Helper()
	errs, outs, want := allReduceFloat32(t, comms, count, seed)
	for r := range comms {
		require.NoError(t, errs[r], "all_reduce %d, rank %d", seed, r)
		require.True(t, bytes.Equal(want, outs[r]), "all_reduce %d: rank %d's result differs", seed, r)
	}
}

// TestListenerSurvivesRunningOutOfDescriptors: while the process has no descriptor
// left, a connection waits in rank 0's backlog and Accept fails with EMFILE; once
// descriptors are free again, rank 1's reconnect after a reset is accepted and resumes.
func TestListenerSurvivesRunningOutOfDescriptors(t *testing.T) {
	t.Setenv("GONCCL_LINK_RETRY_MS", "4000")
	t.Setenv("GONCCL_HEARTBEAT_TIMEOUT_MS", "60000")
	comms := initComms(t, 2, "", 30*time.Second)
	requireAllReduceExact(t, comms, 1000, 1)

	var lim syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim))
	var filler []*os.File
	release := func() {
		for _, f := range filler {
			f.Close()
		}
		filler = nil
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim))
	}
	defer func() {
		if filler != nil {
			release()
		}
	}()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	low := lim
	low.Cur = uint64(len(fds) + 64)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			require.ErrorIs(t, err, syscall.EMFILE)
			break
		}
		filler = append(filler, f)
	}
	// One descriptor for a client socket: its connection completes in the kernel and
	// waits in the backlog, where Accept finds no descriptor for it.
	filler[len(filler)-1].Close()
	filler = filler[:len(filler)-1]
	c, err := net.Dial("tcp", comms[0].peers.l.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	time.Sleep(300 * time.Millisecond)
	release()

	require.Positive(t, resetLinks(comms[1]))
	requireAllReduceExact(t, comms, 1000, 2)
	require.Positive(t, sessionResumes(comms[1]), "the links did not resume")
}

// TestListenerHoldsAgainstAFlood: 2,000 connections opened to rank 0's listener and
// held, and garbage sent on others again and again, while rank 0 and 1 run all_reduces:
// every result is exact, at most maxHandshakes connections are being authenticated at
// any time, none of them with a link's socket buffers, and a reset during the flood
// resumes.
func TestListenerHoldsAgainstAFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 2,000 connections")
	}
	t.Setenv("GONCCL_HEARTBEAT_TIMEOUT_MS", "60000")
	comms := initComms(t, 2, "", 60*time.Second)
	requireAllReduceExact(t, comms, 1000, 1)
	addr := comms[0].peers.l.Addr().String()
	const held = 2000

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	var floodErr error
	wg.Add(1)
	go func() { // open and hold
		defer wg.Done()
		for len(conns) < held {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.Dial("tcp", addr)
			mu.Lock()
			if err != nil {
				floodErr = err
				mu.Unlock()
				return
			}
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	for range 2 { // garbage
		wg.Add(1)
		go func() {
			defer wg.Done()
			junk := bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 8)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c, err := net.Dial("tcp", addr); err == nil {
					_, _ = c.Write(junk)
					c.Close()
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()

	most, big := 0, 0
	check := func() { // the connections rank 0 is handling: being authenticated, or just filed
		p := comms[0].peers
		p.mu.Lock()
		var pending []net.Conn
		for c := range p.inflight {
			pending = append(pending, c)
		}
		p.mu.Unlock()
		most = max(most, len(pending))
		n := 0
		for _, c := range pending {
			if rcvbuf(t, c) >= 4<<20 {
				n++
			}
		}
		big = max(big, n)
	}
	start := time.Now()
	reset := false
	for i := 2; ; i++ {
		check()
		mu.Lock()
		n, ferr := len(conns), floodErr
		mu.Unlock()
		require.NoError(t, ferr, "the flood could not connect")
		if !reset && n >= held/2 {
			require.Positive(t, resetLinks(comms[1]))
			reset = true
		}
		requireAllReduceExact(t, comms, []int{1, 1000, 300 << 10}[i%3], int64(i))
		if n >= held && time.Since(start) > 3*time.Second {
			break
		}
		require.Less(t, time.Since(start), testtime.D(60*time.Second), "the flood did not finish (%d connections open)", n)
	}
	require.True(t, reset)
	// A few more than maxHandshakes: the reconnect's connections, authenticated and
	// being filed.
	require.LessOrEqual(t, most, maxHandshakes+8, "connections being handled at once")
	require.LessOrEqual(t, big, 8, "unauthenticated connections with a link's socket buffers")
	require.Positive(t, sessionResumes(comms[1]), "the reset during the flood did not resume")
	t.Logf("%d connections held, at most %d handled at once, %d of them with a link's buffers", held, most, big)
}

// rcvbuf is c's SO_RCVBUF.
func rcvbuf(t *testing.T, c net.Conn) int {
	sc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	v := -1
	err = sc.Control(func(fd uintptr) {
		v, err = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	})
	if errors.Is(err, net.ErrClosed) {
		return 0
	}
	require.NoError(t, err)
	return v
}

// TestGateGivesWayToNewcomers: with every place taken, a newcomer takes the place of
// the oldest connection that sent nothing in the grace period, else of the oldest
// older than the slow grace, else it is refused.
func TestGateGivesWayToNewcomers(t *testing.T) {
	conns := make([]net.Conn, 4)
	for i := range conns {
		conns[i] = &net.TCPConn{}
	}
	talking := map[net.Conn]bool{conns[0]: true}
	g := gate{max: 3, grace: time.Second, slow: 5 * time.Second, spoke: func(c net.Conn) bool { return talking[c] }}
	t0 := time.Unix(1000, 0)
	for i := range 3 {
		ev, ok := g.admit(conns[i], t0.Add(time.Duration(i)*time.Second))
		require.True(t, ok)
		require.Nil(t, ev)
	}
	// conns[0] (talking, 2.5 s old) stays; conns[1] (silent, 1.5 s) gives way.
	ev, ok := g.admit(conns[3], t0.Add(2500*time.Millisecond))
	require.True(t, ok)
	require.Equal(t, conns[1], ev)
	// conns[2] (silent, 0.6 s) is within its grace, conns[3] too: refused.
	talking[conns[2]] = true
	talking[conns[3]] = true
	newcomer := &net.TCPConn{}
	_, ok = g.admit(newcomer, t0.Add(2600*time.Millisecond))
	require.False(t, ok)
	// At 5 s conns[0], talking but not done, gives way.
	ev, ok = g.admit(newcomer, t0.Add(5*time.Second))
	require.True(t, ok)
	require.Equal(t, conns[0], ev)
	require.True(t, g.done(conns[2]))
	require.False(t, g.done(conns[1]), "given way already")
	require.Equal(t, 3, g.report(t0.Add(6*time.Second), time.Second), "two gave way, one was refused")
}
