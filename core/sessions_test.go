package core

import (
	"bytes"
	"errors"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport/tcp"
)

// resetLinks aborts the TCP connection under every session rank c has (a RST, as
// ss -K sends), and returns how many it reset.
func resetLinks(c *Comm) int {
	n := 0
	for p := range c.nranks {
		for _, s := range c.peers.sess.Sessions(p) {
			if down, _ := s.Down(); !down {
				if tc, ok := s.Conn().(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
					_ = tc.Close()
					n++
				}
			}
		}
	}
	return n
}

// TestCollectivesSurviveResets runs all_reduces (striped over 2 connections) and
// point-to-point messages on 3 ranks over TCP while every connection of one rank is
// reset again and again: every result is exact, no operation fails, and the links
// have resumed.
func TestCollectivesSurviveResets(t *testing.T) {
	t.Setenv("GONCCL_NSOCKS_PERTHREAD", "2")
	comms := initComms(t, 3, "", 60*time.Second)
	require.NotEmpty(t, comms[0].peers.sess.Sessions(1), "the links are no sessions (GONCCL_LINK_RETRY_MS=0?)")
	var resets atomic.Int64
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
				resets.Add(int64(resetLinks(comms[i%len(comms)])))
			}
		}
	}()
	deadline := time.Now().Add(4 * time.Second)
	for i := 0; time.Now().Before(deadline) || (resets.Load() < 20 && time.Now().Before(deadline.Add(30*time.Second))); i++ {
		count := []int{1, 1000, 300 << 10}[i%3]
		errs, outs, want := allReduceFloat32(t, comms, count, int64(i))
		for r := range comms {
			require.NoError(t, errs[r], "all_reduce %d", i)
			require.True(t, bytes.Equal(want, outs[r]), "all_reduce %d: rank %d's result differs", i, r)
		}
		msg := inputs(Float32, Sum, count, i, 7)
		got := make([]byte, len(msg))
		errs = onAll(t, comms[:2], func(c *Comm) (*Request, error) {
			if c.rank == 0 {
				return c.Send(msg, count, Float32, 1, i)
			}
			return c.Recv(got, count, Float32, 0, i)
		})
		require.NoError(t, errors.Join(errs...), "send/recv %d", i)
		require.True(t, bytes.Equal(msg, got), "send/recv %d: the message differs", i)
	}
	resumed := 0
	for _, c := range comms {
		for p := range c.nranks {
			for _, s := range c.peers.sess.Sessions(p) {
				resumed += s.Resumes()
			}
		}
	}
	t.Logf("%d connections reset, %d resumes counted on both ends", resets.Load(), resumed)
	require.Greater(t, resumed, 20)
}

// TestLinkDownPastRetryNamesRank: a rank whose listener is gone (its process exited
// in all but name) refuses the reconnect, and the survivor fails at once, naming it;
// one whose network stays silent past GONCCL_LINK_RETRY_MS is named when the window
// closes.
func TestBrokenLinkThatCannotResume(t *testing.T) {
	t.Setenv("GONCCL_LINK_RETRY_MS", "1500")
	t.Setenv("GONCCL_HEARTBEAT_TIMEOUT_MS", "60000")
	comms := initComms(t, 2, "", 30*time.Second)
	errs, _, _ := allReduceFloat32(t, comms, 1000, 1)
	require.NoError(t, errors.Join(errs...))
	comms[0].peers.l.Close() // rank 0 can no longer be reached: its host refuses
	start := time.Now()
	resetLinks(comms[1])
	errs, _, _ = allReduceFloat32(t, comms, 1000, 2)
	took := time.Since(start)
	require.Error(t, errs[1])
	require.ErrorContains(t, errs[1], "rank 0")
	require.True(t, errors.Is(errs[1], tcp.ErrPeerGone) || bytes.Contains([]byte(errs[1].Error()), []byte("refused the reconnect")), "%v", errs[1])
	require.Less(t, took, 1400*time.Millisecond, "a refused reconnect must not wait for the window")
	require.Error(t, errs[0], "rank 0 learns that rank 1 gave the link up")
}

// TestRetryWindowAboveHeartbeat: with GONCCL_LINK_RETRY_MS above the heartbeat timeout,
// a link that is down and being made again is not declared lost by the heartbeat; the
// window decides, and names the rank with its own cause.
func TestRetryWindowAboveHeartbeat(t *testing.T) {
	t.Setenv("GONCCL_LINK_RETRY_MS", "3000")
	t.Setenv("GONCCL_HEARTBEAT_TIMEOUT_MS", "800")
	comms := initComms(t, 2, "", 30*time.Second)
	errs, _, _ := allReduceFloat32(t, comms, 1000, 1)
	require.NoError(t, errors.Join(errs...))
	// Rank 0's address answers TCP but nobody speaks: reconnects time out, the link
	// stays down (as when a switch reboots) without being refused.
	addr := comms[0].peers.l.Addr().(*net.TCPAddr)
	comms[0].peers.l.Close()
	mute, err := net.ListenTCP("tcp", addr)
	require.NoError(t, err)
	defer mute.Close()
	start := time.Now()
	resetLinks(comms[1])
	errs, _, _ = allReduceFloat32(t, comms, 1000, 2)
	took := time.Since(start)
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.NotContains(t, err.Error(), "missed heartbeats", "rank %d: the heartbeat gave up on a link that was reconnecting", r)
	}
	require.ErrorContains(t, errs[1], tcp.ErrLinkDown.Error())
	require.ErrorContains(t, errs[1], "rank 0")
	require.Greater(t, took, 2500*time.Millisecond, "failed before the window closed")
}

// TestResetsLeaveNothingBehind: 100 resets of every connection of one rank, each
// followed by an all_reduce that resumes the links, leave the process with as many
// file descriptors and goroutines as before, and no copies held once idle.
func TestResetsLeaveNothingBehind(t *testing.T) {
	comms := initComms(t, 2, "", 60*time.Second)
	round := func(i int) {
		errs, outs, want := allReduceFloat32(t, comms, 300<<10, int64(i))
		for r := range comms {
			require.NoError(t, errs[r], "all_reduce %d", i)
			require.True(t, bytes.Equal(want, outs[r]), "all_reduce %d: rank %d's result differs", i, r)
		}
	}
	round(0)
	settled := func() (fds, goroutines int) {
		time.Sleep(200 * time.Millisecond) // acknowledgers and sweeps go idle
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		return len(ents), runtime.NumGoroutine()
	}
	fds0, g0 := settled()
	resets := 0
	for i := 1; i <= 100; i++ {
		resets += resetLinks(comms[i%2])
		round(i)
	}
	require.GreaterOrEqual(t, resets, 100)
	fds1, g1 := settled()
	t.Logf("%d resets: fds %d -> %d, goroutines %d -> %d", resets, fds0, fds1, g0, g1)
	require.LessOrEqual(t, fds1, fds0+2, "file descriptors grew with resets")
	require.LessOrEqual(t, g1, g0+4, "goroutines grew with resets")
	require.Eventually(t, func() bool { now, _ := tcp.RetainedBytes(); return now == 0 }, 5*time.Second, 20*time.Millisecond,
		"idle sessions still hold copies")
}
