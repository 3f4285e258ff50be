package shm

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// The child side of the cross-process tests: it connects to the address in
// GONCCL_SHM_TEST_ADDR, opens the parent's segment and echoes frames until told to
// stop (a frame with Seq 0), or, with GONCCL_SHM_TEST_HANG set, waits forever to be
// killed.
func TestMain(m *testing.M) {
	if addr := os.Getenv("GONCCL_SHM_TEST_ADDR"); addr != "" {
		os.Exit(child(addr))
	}
	os.Exit(m.Run())
}

func child(addr string) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ring, _ := strconv.Atoi(os.Getenv("GONCCL_SHM_TEST_RING"))
	l, err := Connect(c, 0, false, ring, time.Now().Add(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer l.Close()
	if os.Getenv("GONCCL_SHM_TEST_HANG") != "" {
		select {}
	}
	buf := make([]byte, 4<<20)
	for seq := uint64(1); ; seq++ {
		h := transport.Header{Seq: seq, Root: -1}
		n, _ := strconv.Atoi(os.Getenv("GONCCL_SHM_TEST_SIZE"))
		if err := l.Recv(&h, buf[:n], time.Now().Add(10*time.Second)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
		if err := l.Send(&h, buf[:n], time.Now().Add(10*time.Second)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 5
		}
		if seq == 3 {
			return 0
		}
	}
}

// spawn starts a child process that opens this process's segment through /proc.
func spawn(t *testing.T, ring, size int, hang bool) (*Link, *exec.Cmd) {
	t.Helper()
	return spawnUnder(t, ring, size, hang)
}

// spawnUnder is spawn with the child started by the command wrap (none: directly).
func spawnUnder(t *testing.T, ring, size int, hang bool, wrap ...string) (*Link, *exec.Cmd) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	argv := append(wrap, os.Args[0], "-test.run=^$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "GONCCL_SHM_TEST_ADDR="+ln.Addr().String(),
		"GONCCL_SHM_TEST_RING="+strconv.Itoa(ring), "GONCCL_SHM_TEST_SIZE="+strconv.Itoa(size))
	if hang {
		cmd.Env = append(cmd.Env, "GONCCL_SHM_TEST_HANG=1")
	}
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c, err := ln.Accept()
	require.NoError(t, err)
	l, err := Connect(c, 1, true, ring, time.Now().Add(10*time.Second))
	require.NoError(t, err)
	return l, cmd
}

func TestAcrossProcesses(t *testing.T) {
	noLeaks(t)
	size := 3<<20 + 7 // larger than the ring
	l, cmd := spawn(t, 1<<16, size, false)
	defer l.Close()
	for seq := uint64(1); seq <= 3; seq++ {
		h := transport.Header{Seq: seq, Root: -1}
		p := pattern(size, byte(seq))
		errc := make(chan error, 1)
		go func() { errc <- l.Send(&h, p, time.Now().Add(10*time.Second)) }()
		got := make([]byte, size)
		require.NoError(t, l.Recv(&h, got, time.Now().Add(10*time.Second)))
		require.NoError(t, <-errc)
		require.Equal(t, p, got)
	}
	require.NoError(t, cmd.Wait())
}

// A peer process killed outright (it never marks the segment closed) must not leave
// us waiting until the deadline: the liveness connection's EOF wakes the receiver.
func TestPeerProcessKilled(t *testing.T) {
	noLeaks(t)
	l, cmd := spawn(t, 4096, 0, true)
	defer l.Close()
	errc := make(chan error, 1)
	go func() { errc <- l.Recv(&transport.Header{}, nil, time.Now().Add(time.Minute)) }()
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	require.NoError(t, cmd.Process.Kill())
	select {
	case err := <-errc:
		require.ErrorIs(t, err, transport.ErrPeerClosed)
		require.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(20 * time.Second):
		t.Fatal("the receiver still waits on a killed peer")
	}
}

// A child in a pid namespace of its own, with its own /proc (unshare --pid --fork
// --mount-proc), cannot open this process's /proc/<pid>/fd: the segment is handed
// over an abstract unix socket instead, and the pair shares memory all the same.
func TestAcrossPidNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for unshare --pid")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	noLeaks(t)
	size := 1<<20 + 3
	l, cmd := spawnUnder(t, 1<<16, size, false, unshare, "--pid", "--fork", "--mount-proc")
	defer l.Close()
	for seq := uint64(1); seq <= 3; seq++ {
		h := transport.Header{Seq: seq, Root: -1}
		p := pattern(size, byte(seq))
		errc := make(chan error, 1)
		go func() { errc <- l.Send(&h, p, time.Now().Add(10*time.Second)) }()
		got := make([]byte, size)
		require.NoError(t, l.Recv(&h, got, time.Now().Add(10*time.Second)))
		require.NoError(t, <-errc)
		require.Equal(t, p, got)
	}
	require.NoError(t, cmd.Wait())
}
