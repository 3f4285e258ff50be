package core

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport/tcp"
)

// GONCCL_PORT_RANGE (iface.go's listen, tcp.ListenIn): every listener of every rank,
// the bootstrap root's included, takes a port of the range; when the range is used up,
// init fails naming the setting.

// holdPorts binds n consecutive ports on 127.0.0.1 and returns the listeners holding
// them (closed at the end of the test).
func holdPorts(t *testing.T, n int) []*net.TCPListener {
	t.Helper()
	for range 100 {
		base := 20000 + rand.IntN(10000)
		var held []*net.TCPListener
		for p := base; p < base+n; p++ {
			l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: p})
			if err != nil {
				break
			}
			held = append(held, l)
		}
		if len(held) == n {
			t.Cleanup(func() {
				for _, l := range held {
					l.Close()
				}
			})
			return held
		}
		for _, l := range held {
			l.Close()
		}
	}
	t.Fatalf("found no %d consecutive free ports", n)
	return nil
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	a, err := net.ResolveTCPAddr("tcp", addr)
	require.NoError(t, err)
	return a.Port
}

// Four ranks and the root in a range of 8 ports: every listener is in it, and the
// ranks work.
func TestPortRangeConfinesListeners(t *testing.T) {
	held := holdPorts(t, 8)
	lo := held[0].Addr().(*net.TCPAddr).Port
	for _, l := range held {
		l.Close()
	}
	t.Setenv("GONCCL_SOCKET_IFNAME", "=lo")
	t.Setenv("GONCCL_PORT_RANGE", fmt.Sprintf("%d-%d", lo, lo+7))
	id, err := NewUniqueID()
	require.NoError(t, err)
	root, err := id.rootAddr()
	require.NoError(t, err)
	ports := map[int]string{portOf(t, root): "the root"}
	comms := make([]*Comm, 4)
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Go(func() { comms[r], errs[r] = NewComm(id, 4, r, Options{Timeout: 30 * time.Second}) })
	}
	wg.Wait()
	for r, c := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		t.Cleanup(func() { _ = c.Abort() })
		p := portOf(t, c.peers.l.Addr().String())
		require.NotContains(t, ports, p, "rank %d listens on %s's port", r, ports[p])
		ports[p] = fmt.Sprintf("rank %d", r)
	}
	for p, who := range ports {
		require.True(t, p >= lo && p <= lo+7, "%s listens on port %d, outside %d-%d", who, p, lo, lo+7)
	}
	allReduceExactly(t, comms, 1000)
}

// A range with every port taken by others: the unique id cannot be made, and the
// error names the setting. A range with two free ports for the root and two ranks:
// the rank left without a port fails init, naming it too.
func TestPortRangeExhausted(t *testing.T) {
	held := holdPorts(t, 3)
	lo := held[0].Addr().(*net.TCPAddr).Port
	t.Setenv("GONCCL_SOCKET_IFNAME", "=lo")
	t.Setenv("GONCCL_PORT_RANGE", fmt.Sprintf("%d-%d", lo, lo+2))
	want := fmt.Sprintf("GONCCL_PORT_RANGE=%d-%d", lo, lo+2)

	_, err := NewUniqueID()
	require.ErrorIs(t, err, tcp.ErrPortsExhausted)
	require.ErrorContains(t, err, want)
	require.ErrorContains(t, err, "all 3 ports of")

	held[1].Close()
	held[2].Close()
	id, err := NewUniqueID()
	require.NoError(t, err)
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Go(func() { comms[r], errs[r] = NewComm(id, 2, r, Options{Timeout: 3 * time.Second}) })
	}
	wg.Wait()
	exhausted := 0
	for r := range comms {
		if comms[r] != nil {
			_ = comms[r].Abort()
		}
		require.Error(t, errs[r], "rank %d", r)
		if strings.Contains(errs[r].Error(), want) {
			require.ErrorIs(t, errs[r], tcp.ErrPortsExhausted)
			exhausted++
		}
	}
	require.Equal(t, 1, exhausted, "one rank should find the range used up: %v", errs)
}
