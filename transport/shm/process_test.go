package shm

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// The child side of the cross-process tests: it connects to the address in
// GONCCL_SHM_TEST_ADDR, opens the parent's segment and echoes frames until told to
// stop (a frame with Seq 0), or, with GONCCL_SHM_TEST_HANG set, waits forever to be
// killed. GONCCL_SHM_TEST_DELAY_MS=N delays every echo by N ms.
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
	if os.Getenv("GONCCL_SHM_TEST_GC") != "" {
		return gcBesideRawSleeper(l)
	}
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
		if ms, _ := strconv.Atoi(os.Getenv("GONCCL_SHM_TEST_DELAY_MS")); ms > 0 {
			time.Sleep(time.Duration(ms) * time.Millisecond)
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

// gcBesideRawSleeper is the child of TestRawSleepDoesNotBlockGC: a receive from the
// parent (which sends nothing) sleeps raw while this process collects garbage.
func gcBesideRawSleeper(l *Link) int {
	runtime.GOMAXPROCS(2) // one P for the raw sleeper, one for the rest
	SetCrowded(true)
	go func() { _ = l.Recv(&transport.Header{}, nil, time.Now().Add(10*time.Minute)) }()
	for rawSleepers.Load() == 0 {
		time.Sleep(100 * time.Microsecond)
	}
	for i := 0; i < 5; i++ {
		runtime.GC()
	}
	return 0
}

// spawn starts a child process that opens this process's segment through /proc.
func spawn(t *testing.T, ring, size int, hang bool, env ...string) (*Link, *exec.Cmd) {
	t.Helper()
	return spawnEnv(t, ring, size, hang, env)
}

// spawnUnder is spawn with the child started by the command wrap (none: directly).
func spawnUnder(t *testing.T, ring, size int, hang bool, wrap ...string) (*Link, *exec.Cmd) {
	t.Helper()
	return spawnEnv(t, ring, size, hang, nil, wrap...)
}

// spawnEnv is spawnUnder with env added to the child's environment.
func spawnEnv(t *testing.T, ring, size int, hang bool, env []string, wrap ...string) (*Link, *exec.Cmd) {
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
	cmd.Env = append(cmd.Env, env...)
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

// A wait on a peer in another process sleeps raw (keeping its P, see futexSleepRaw),
// and the peer's wake-up reaches it: some raw sleep ends by FUTEX_WAKE. (A lost
// wake-up would not show as a hang: the runtime's preemption signal ends a raw sleep
// every 10-20 ms.)
func TestCrossProcessWaitWakes(t *testing.T) {
	noLeaks(t)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	SetCrowded(true) // raw sleeps only where the host's ranks outnumber its cores
	defer SetCrowded(false)
	size := 1000
	l, cmd := spawn(t, 1<<16, size, false, "GONCCL_SHM_TEST_DELAY_MS=100")
	defer l.Close()
	require.True(t, l.remote, "a peer in another process must count as remote")
	wakes := rawWakes.Load()
	for seq := uint64(1); seq <= 3; seq++ {
		h := transport.Header{Seq: seq, Root: -1}
		p := pattern(size, byte(seq))
		require.NoError(t, l.Send(&h, p, time.Now().Add(10*time.Second)))
		got := make([]byte, size)
		errc := make(chan error, 1)
		go func() { errc <- l.Recv(&h, got, time.Now().Add(30*time.Second)) }()
		// The child echoes 100 ms later: the receiver spins briefly, then sleeps raw.
		require.Eventually(t, func() bool { return rawSleepers.Load() > 0 }, 10*time.Second, 100*time.Microsecond,
			"the receiver never slept raw on a peer in another process")
		require.NoError(t, <-errc)
		require.Equal(t, p, got)
	}
	require.NoError(t, cmd.Wait())
	require.Greater(t, rawWakes.Load(), wakes, "no raw sleep was ended by the peer's wake-up")
}

// A receiver asleep in a raw futex holds its P, which a stop-the-world (a GC) must
// wait for: the sleep's bound keeps that wait short. Run in the child (GONCCL_SHM_TEST_GC),
// since a GC that never ends stops every goroutine of its process, timers included:
// here the child is killed after a minute and the test fails.
func TestRawSleepDoesNotBlockGC(t *testing.T) {
	noLeaks(t)
	l, cmd := spawn(t, 4096, 0, false, "GONCCL_SHM_TEST_GC=1")
	defer l.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "the child's GCs beside a raw sleeper failed")
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("a GC in the child waited on a raw sleeper for a minute: the sleep is not bounded")
	}
}

// Two sides in one process are not remote: their waits give their P up, since the
// peer that wakes them may need it.
func TestSameProcessIsNotRemote(t *testing.T) {
	a, b := pair(t, 4096)
	defer a.Close()
	defer b.Close()
	require.False(t, a.remote)
	require.False(t, b.remote)
}
