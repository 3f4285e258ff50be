package core

import (
	"net"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport/tcp"
)

// initAll creates an n-rank communicator over real TCP sockets, one goroutine per rank.
func initAll(t *testing.T, n int) []*Comm {
	t.Helper()
	return initAllTimeout(t, n, 10*time.Second)
}

// initAllTimeout is initAll with the communicator's operation timeout.
func initAllTimeout(t *testing.T, n int, timeout time.Duration) []*Comm {
	t.Helper()
	return initAllHooked(t, n, timeout, nil)
}

// initAllHooked is initAllTimeout with tests' hooks for every rank.
func initAllHooked(t *testing.T, n int, timeout time.Duration, hooks *testHooks) []*Comm {
	t.Helper()
	id, err := NewUniqueID()
	require.NoError(t, err)
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, n, r, Options{Timeout: timeout, test: hooks})
		}()
	}
	wg.Wait()
	for r := 0; r < n; r++ {
		require.NoError(t, errs[r], "rank %d", r)
	}
	return comms
}

func TestBootstrapOverTCP(t *testing.T) {
	for _, n := range []int{1, 2, 4} {
		comms := initAll(t, n)
		count := 100003
		errs, outs, want := allReduceFloat32(t, comms, count, 1)
		for r := range comms {
			require.NoError(t, errs[r])
			require.Equal(t, want, outs[r])
			require.NoError(t, comms[r].Destroy())
		}
	}
}

func TestBootstrapIgnoresStrangers(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	addr, err := id.rootAddr()
	require.NoError(t, err)
	// A stranger connects to the root first and sends garbage; the job still forms.
	s, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, _ = s.Write([]byte("hello, I am not a gonccl rank at all........"))
	defer s.Close()

	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, 2, r, Options{Timeout: 10 * time.Second})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
}

func TestInitTimesOutWhenARankIsMissing(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	start := time.Now()
	_, err = NewComm(id, 2, 0, Options{Timeout: 300 * time.Millisecond})
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "rank 0 of 2")
	require.Less(t, time.Since(start), 5*time.Second)
}

// Every rank that joined is told which ranks never did, in time (the root gives up
// before the ranks' own deadline), with no word of network interfaces, which are not
// the problem.
func TestInitTimeoutNamesTheMissingRanks(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[r] = NewComm(id, 4, r, Options{Timeout: time.Second})
		}()
	}
	wg.Wait()
	require.Less(t, time.Since(start), 5*time.Second)
	for r, err := range errs {
		require.ErrorIs(t, err, ErrTimeout, "rank %d", r)
		require.Regexp(t, `Timed out after (6|7|8|9)\d\d ms waiting for ranks \[2 3\] to join`, err.Error(), "rank %d", r)
		require.ErrorContains(t, err, "the init timeout is 1000 ms", "rank %d", r)
		require.NotContains(t, err.Error(), "GONCCL_SOCKET_IFNAME", "rank %d", r)
	}
}

// The caller's timeout governs init, not the GONCCL_TIMEOUT_MS of the process that made
// the unique id (under torch, rank 0's, which torch's timeout overrides), and the error
// states the time actually waited.
func TestInitWaitsForTheCallersTimeout(t *testing.T) {
	t.Setenv("GONCCL_TIMEOUT_MS", "300")
	id, err := NewUniqueID()
	require.NoError(t, err)
	start := time.Now()
	_, err = NewComm(id, 2, 0, Options{Timeout: 1500 * time.Millisecond})
	waited := time.Since(start)
	require.ErrorIs(t, err, ErrTimeout)
	require.Greater(t, waited, time.Second, "the root gave up at GONCCL_TIMEOUT_MS: %v", err)
	m := regexp.MustCompile(`Timed out after (\d+) ms waiting for ranks \[1\] to join`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, err.Error())
	ms, _ := strconv.Atoi(m[1])
	require.LessOrEqual(t, time.Duration(ms)*time.Millisecond, waited, err.Error())
	require.Greater(t, time.Duration(ms)*time.Millisecond, time.Second, err.Error())
}

func TestUniqueIDRejectsGarbage(t *testing.T) {
	var id UniqueID
	_, err := NewComm(id, 2, 0, Options{Timeout: time.Second})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "not a gonccl unique id")
}

func TestPairSockets(t *testing.T) {
	a := rankInfo{Host: "h1", Shm: true, SockThreads: 2, SocksPerThread: 4}
	b := rankInfo{Host: "h2", Shm: true, SockThreads: 1, SocksPerThread: 2}
	socks, threads := pairSockets(a, b)
	require.Equal(t, 2, socks, "the smaller product of the two ends")
	require.Equal(t, 2, threads, "a's own thread count")
	socks, threads = pairSockets(b, a)
	require.Equal(t, []int{2, 1}, []int{socks, threads})
	c := a
	c.Host = "h2"
	socks, _ = pairSockets(a, c)
	require.Equal(t, 8, socks)
	c.Host = "h1"
	socks, threads = pairSockets(a, c)
	require.Equal(t, []int{1, 1}, []int{socks, threads}, "shared memory carries same-host pairs")
	c.Shm = false
	socks, _ = pairSockets(a, c)
	require.Equal(t, 8, socks, "without shared memory a same-host pair stripes over TCP")
	socks, threads = pairSockets(rankInfo{Host: "x"}, rankInfo{Host: "y"})
	require.Equal(t, []int{1, 1}, []int{socks, threads}, "a peer that states no layout gets one connection")
}

func TestSocketLayoutParams(t *testing.T) {
	t.Setenv("GONCCL_SOCKET_NTHREADS", "4")
	t.Setenv("GONCCL_NSOCKS_PERTHREAD", "8")
	cfg, err := loadConfig()
	require.NoError(t, err)
	require.Equal(t, []int{4, 4}, []int{cfg.sockThreads, cfg.socksPerThread}, "capped at 16 connections per peer")
	t.Setenv("GONCCL_NSOCKS_PERTHREAD", "0")
	_, err = loadConfig()
	require.ErrorContains(t, err, "GONCCL_NSOCKS_PERTHREAD")
	t.Setenv("GONCCL_NSOCKS_PERTHREAD", "1")
	t.Setenv("GONCCL_SOCKET_NTHREADS", "17")
	_, err = loadConfig()
	require.ErrorContains(t, err, "GONCCL_SOCKET_NTHREADS")
}

// Over TCP with several connections per peer (shared memory off), collectives large
// enough to be striped give the reference result, and a mismatch still names both
// ranks' operations on both sides.
func TestStripedTCPCollectives(t *testing.T) {
	t.Setenv("GONCCL_SHM_DISABLE", "1")
	t.Setenv("GONCCL_SOCKET_NTHREADS", "2")
	t.Setenv("GONCCL_NSOCKS_PERTHREAD", "3")
	n := 3
	comms := initAll(t, n)
	for _, c := range comms {
		for p, l := range linksOf(c) {
			if p != c.rank {
				sl, ok := l.(*tcp.StripedLink)
				require.True(t, ok, "rank %d's link to %d is a %T", c.rank, p, l)
				require.Equal(t, 6, sl.Sockets())
			}
		}
	}
	for _, count := range []int{1, 1000, 1<<20 + 3} {
		errs, outs, want := allReduceFloat32(t, comms, count, int64(count))
		for r := range comms {
			require.NoError(t, errs[r])
			require.Equal(t, want, outs[r], "count %d rank %d", count, r)
		}
	}
	counts := []int{1 << 20, 1<<20 + 1024, 1 << 20}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		buf := make([]byte, 4*counts[c.rank])
		return c.Broadcast(buf, buf, counts[c.rank], Float32, 0)
	})
	require.ErrorIs(t, errs[1], ErrMismatch)
	require.ErrorContains(t, errs[1], "rank 1 called broadcast #4 (float32 x 1049600, root 0) but rank 0 called broadcast #4 (float32 x 1048576, root 0)")
	for _, c := range comms {
		_ = c.Abort()
	}
}
