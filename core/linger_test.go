package core

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tcpConns lists the TCP sockets of this network namespace with port at either end
// (listening sockets aside), each as "local remote", TIME_WAIT included: a connection
// closed since still shows for a minute.
func tcpConns(t *testing.T, port int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	hex := fmt.Sprintf(":%04X", port)
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] == "0A" { // 0A: LISTEN
				continue
			}
			local, remote := fields[1], fields[2]
			if strings.HasSuffix(local, hex) || strings.HasSuffix(remote, hex) {
				if local > remote { // both ends of one connection count once
					local, remote = remote, local
				}
				out[local+" "+remote] = true
			}
		}
		f.Close()
	}
	return out
}

// lingerPolls is the most polls a linger can make in d: it sleeps 5 ms after its
// first ask, twice as long after each next, at most 100 ms.
func lingerPolls(d time.Duration) int {
	n, wait, slept := 1, 5*time.Millisecond, time.Duration(0)
	for slept+wait <= d {
		slept += wait
		n++
		wait = min(2*wait, 100*time.Millisecond)
	}
	return n
}

// TestLingerAsksOncePerPeerPerPoll: rank 1 has 5 sessions to rank 0 (4 stripes and the
// point-to-point channel), 4 of them holding bytes rank 0 has not read; its linger
// polls rank 0 until the retry window closes, with one connection per poll, not one
// per session.
func TestLingerAsksOncePerPeerPerPoll(t *testing.T) {
	t.Setenv("GONCCL_NSOCKS_PERTHREAD", "4")
	t.Setenv("GONCCL_LINK_RETRY_MS", "1500")
	t.Setenv("GONCCL_HEARTBEAT_TIMEOUT_MS", "60000")
	comms := initComms(t, 2, "", 30*time.Second)
	requireAllReduceExact(t, comms, 300<<10, 1)
	require.Len(t, comms[1].peers.sess.Sessions(0), 5)

	// Rank 1 broadcasts alone: rank 0 posts nothing and reads none of it.
	buf := make([]byte, 8<<20)
	go func() { _, _ = comms[1].Broadcast(buf, buf, len(buf)/4, Float32, 1) }()
	time.Sleep(300 * time.Millisecond)

	port := comms[0].peers.l.Addr().(*net.TCPAddr).Port
	before := tcpConns(t, port)
	start := time.Now()
	comms[1].peers.linger()
	took := time.Since(start)
	dials := 0
	for c := range tcpConns(t, port) {
		if !before[c] {
			dials++
		}
	}
	polls := lingerPolls(took)
	t.Logf("linger: %v, %d connections to rank 0, at most %d polls", took.Round(time.Millisecond), dials, polls)
	require.Greater(t, took, time.Second, "rank 0 has not read the broadcast: the linger waits for the window")
	require.Positive(t, dials)
	require.LessOrEqual(t, dials, polls, "more than one connection per poll")
}
