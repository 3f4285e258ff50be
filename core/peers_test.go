package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	osexec "os/exec"

	"github.com/gonccl/gonccl/internal/testtime"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestInitialPeersAreSymmetric(t *testing.T) {
	require.Equal(t, []int{1, 2, 7}, initialPeers(0, 8))
	require.Equal(t, []int{1, 3, 5}, initialPeers(4, 8)) // ring 3, 5; parent 1; no children
	require.Equal(t, []int{1}, initialPeers(0, 2))
	require.Empty(t, initialPeers(0, 1))
	for _, n := range []int{2, 3, 5, 64, 1000} {
		for r := 0; r < n; r++ {
			ps := initialPeers(r, n)
			require.LessOrEqual(t, len(ps), 5)
			for _, p := range ps {
				require.Contains(t, initialPeers(p, n), r, "n=%d: %d lists %d but not back", n, r, p)
			}
		}
	}
}

// initComms starts n ranks of one communicator in this process, over TCP (shared
// memory off: n ranks would map a segment per connected pair), with GONCCL_ALGO algo.
func initComms(t *testing.T, n int, algo string, timeout time.Duration) []*Comm {
	t.Helper()
	return initCommsHooked(t, n, algo, timeout, nil)
}

// initCommsHooked is initComms with tests' hooks for every rank.
func initCommsHooked(t *testing.T, n int, algo string, timeout time.Duration, hooks *testHooks) []*Comm {
	t.Helper()
	t.Setenv("GONCCL_SHM_DISABLE", "1")
	t.Setenv("GONCCL_ALGO", algo)
	comms := initAllHooked(t, n, timeout, hooks)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Abort()
		}
	})
	return comms
}

// wantConns is how many TCP connections rank's links to peers hold.
func wantConns(c *Comm, peers []int) int64 {
	total := 0
	for _, p := range peers {
		socks, _ := pairSockets(c.peers.ranks[c.rank], c.peers.ranks[p])
		total += socks + 1 // the collective link's, and the point-to-point one
	}
	return int64(total)
}

// allReduceExactly sums count int64s over every rank of comms and checks each result.
func allReduceExactly(t *testing.T, comms []*Comm, count int) {
	t.Helper()
	ins, outs := make([][]byte, len(comms)), make([][]byte, len(comms))
	for r := range ins {
		ins[r] = inputs(Int64, Sum, count, r, 1)
		outs[r] = make([]byte, len(ins[r]))
	}
	for r, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(ins[c.rank], outs[c.rank], count, Int64, Sum)
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	want := reference(Int64, Sum, ins, count)
	for r := range comms {
		require.Equal(t, want, outs[r], "rank %d", r)
	}
}

// A ring all_reduce at 64 ranks connects each rank to its ring neighbours and tree
// relatives at init, and to no one else: per rank, the connections it opens stay those
// of at most 5 peers, not 63.
func TestRingAllReduceConnectionsAt64Ranks(t *testing.T) {
	const n = 64
	comms := initComms(t, n, "allreduce:ring", 60*time.Second)
	for _, c := range comms {
		require.Equal(t, initialPeers(c.rank, n), c.peers.connected(), "rank %d after init", c.rank)
	}
	allReduceExactly(t, comms, 1000)
	for r, c := range comms {
		ps := initialPeers(r, n)
		require.Equal(t, ps, c.peers.connected(), "rank %d after a ring all_reduce", r)
		require.Equal(t, wantConns(c, ps), c.peers.opened.Load(), "rank %d's connections", r)
		require.LessOrEqual(t, len(ps), 5)
	}
	require.Equal(t, []int{1, 2, 63}, comms[0].peers.connected())
	require.Equal(t, []int{4, 9, 11, 21, 22}, comms[10].peers.connected())
}

// Every pair needs its link at the same moment from both ends (alltoall: each rank
// sends to and receives from every other; point-to-point: each rank sends to every
// other first). Each pair still ends with exactly one link: no rank holds more
// connections than its links need, and none was dropped as a duplicate.
func TestOnDemandLinksFromBothEnds(t *testing.T) {
	obsCore, logs := observer.New(zapcore.WarnLevel)
	hooks := &testHooks{logTee: obsCore}
	const n = 9 // beyond the initial peers of most ranks
	check := func(comms []*Comm) {
		t.Helper()
		for r, c := range comms {
			var all []int
			for p := range n {
				if p != r {
					all = append(all, p)
				}
			}
			require.Equal(t, all, c.peers.connected(), "rank %d", r)
			require.Equal(t, wantConns(c, all), c.peers.opened.Load(), "rank %d's connections", r)
		}
		for _, e := range logs.All() {
			require.NotContains(t, e.Message+fmt.Sprint(e.ContextMap()), "dropped", "a connection was refused")
		}
	}
	t.Run("alltoall", func(t *testing.T) {
		comms := initCommsHooked(t, n, "", 20*time.Second, hooks)
		const count = 3
		outs := make([][]byte, n)
		for r, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
			in := make([]byte, 8*count*n)
			for p := range n {
				for i := range count {
					binary.LittleEndian.PutUint64(in[8*(p*count+i):], uint64(1000*c.rank+p))
				}
			}
			outs[c.rank] = make([]byte, len(in))
			return c.AlltoAll(in, outs[c.rank], count, Int64)
		}) {
			require.NoError(t, err, "rank %d", r)
		}
		for r := range outs {
			for p := range n {
				require.Equal(t, uint64(1000*p+r), binary.LittleEndian.Uint64(outs[r][8*p*count:]), "rank %d from %d", r, p)
			}
		}
		check(comms)
	})
	t.Run("p2p", func(t *testing.T) {
		comms := initCommsHooked(t, n, "", 20*time.Second, hooks)
		var wg sync.WaitGroup
		errs := make(chan error, 2*n*n)
		for _, c := range comms {
			for p := range n {
				if p == c.rank {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					out := binary.LittleEndian.AppendUint64(nil, uint64(c.rank))
					sreq, err := c.Send(out, 1, Int64, p, 7)
					if err != nil {
						errs <- err
						return
					}
					in := make([]byte, 8)
					rreq, err := c.Recv(in, 1, Int64, p, 7)
					if err != nil {
						errs <- err
						return
					}
					for _, q := range []*Request{sreq, rreq} {
						if _, err := q.Wait(-1); err != nil {
							errs <- err
						}
					}
					if got := binary.LittleEndian.Uint64(in); got != uint64(p) {
						errs <- fmt.Errorf("rank %d got %d from rank %d", c.rank, got, p)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		check(comms)
	})
}

// 1,024 ranks, each a communicator in this one process over real TCP sockets on
// loopback (one listener each; shared memory off), init and all_reduce exactly, each
// rank holding links to its neighbours in rank order only (beyond 64 ranks no rank
// connects during init). Processes of this size do not fit the CI machine; sockets,
// handshakes, the bootstrap and the algorithms are the real ones. The all_reduce is the
// chain (a reduce into rank 0 and a broadcast back along the neighbours: about 2 messages
// per rank): the ring over the same links sends 2(n-1) per rank, 2.1 million messages in
// all, some 40 s of CPU that on a loaded 2-core machine passed the operation's timeout
// (recursive doubling or halving would link each rank to log2(n) partners, past the
// process's fd limit).
func TestThousandRanksInOneProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("1,024 ranks: not in -short")
	}
	const n = 1024
	start := time.Now()
	comms := initComms(t, n, "allreduce:chain", 120*time.Second)
	t.Logf("init of %d ranks: %v", n, time.Since(start))
	for _, count := range []int{1027} {
		start = time.Now()
		ins, outs := make([][]byte, n), make([][]byte, n)
		for r := range ins {
			ins[r] = inputs(Int64, Sum, count, r, int64(count))
			outs[r] = make([]byte, len(ins[r]))
		}
		for r, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
			return c.AllReduce(ins[c.rank], outs[c.rank], count, Int64, Sum)
		}) {
			require.NoError(t, err, "rank %d", r)
		}
		want := reference(Int64, Sum, ins, count)
		for r := range outs {
			require.Equal(t, want, outs[r], "rank %d, %d elements", r, count)
		}
		t.Logf("all_reduce of %d int64 on %d ranks: %v", count, n, time.Since(start))
	}
	for r, c := range comms {
		require.Equal(t, chainNeighbours(r, n), c.peers.connected(), "rank %d", r)
	}
}

// chainNeighbours is {rank-1, rank+1} among 0..n-1.
func chainNeighbours(rank, n int) []int {
	var ps []int
	if rank > 0 {
		ps = append(ps, rank-1)
	}
	if rank < n-1 {
		ps = append(ps, rank+1)
	}
	return ps
}

// ringNeighbours is {rank-1, rank+1} among n > 2, sorted.
func ringNeighbours(rank, n int) []int {
	ps := []int{(rank + n - 1) % n, (rank + 1) % n}
	slices.Sort(ps)
	return ps
}

// GONCCL_RUNTIME_CONNECT: with 1, init connects no peer and the first ring all_reduce
// connects exactly the ring neighbours; with 0, init connects the initial peers; auto
// is 0 up to 64 ranks and 1 beyond.
func TestRuntimeConnect(t *testing.T) {
	require.False(t, runtimeConnect("auto").lazy(64))
	require.True(t, runtimeConnect("auto").lazy(65))
	require.True(t, runtimeConnect("1").lazy(2))
	require.False(t, runtimeConnect("0").lazy(1024))
	const n = 8
	for _, mode := range []string{"1", "0"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("GONCCL_RUNTIME_CONNECT", mode)
			comms := initComms(t, n, "allreduce:ring", 30*time.Second)
			for r, c := range comms {
				want := initialPeers(r, n)
				if mode == "1" {
					want = nil
				}
				require.Equal(t, want, c.peers.connected(), "rank %d after init", r)
			}
			allReduceExactly(t, comms, 100)
			for r, c := range comms {
				peers := initialPeers(r, n)
				if mode == "1" {
					peers = ringNeighbours(r, n)
				}
				require.Equal(t, peers, c.peers.connected(), "rank %d after a ring all_reduce", r)
			}
		})
	}
}

// A peer that is gone fails the operation that needs a new link to it, naming it: at
// once when nothing listens for it any more, and within the operation's timeout when
// it dies halfway through making the link.
func TestPeerDiesWhileConnecting(t *testing.T) {
	const n = 8 // rank 0's initial peers are 1, 2 and 7: 4 and 5 are linked on demand
	timeout := testtime.D(3 * time.Second)
	c, cmds := spawnRanksWith(t, n, 0, []string{"GONCCL_TEST_IDLE=60s", "GONCCL_TEST_DIE_DIALING=0"}, timeout)
	defer func() { _ = c.Abort() }()
	require.Equal(t, []int{1, 2, 7}, c.peers.connected())

	// Rank 4, called by rank 0, dials its first connection back and dies (SIGKILL).
	start := time.Now()
	_, err := c.Send(make([]byte, 8), 1, Int64, 4, 0)
	took := time.Since(start)
	require.Error(t, err)
	require.ErrorIs(t, err, ErrTimeout)
	require.Contains(t, err.Error(), "waiting for rank 4 (pid")
	require.Contains(t, err.Error(), "(1 connections of its link arrived)")
	require.Less(t, took, timeout+testtime.D(10*time.Second), "within the operation's timeout")
	require.NoError(t, waitExit(cmds[3], testtime.D(20*time.Second)), "rank 4 did not die")

	// Rank 5 is gone before anyone asks: its listener refuses at once.
	require.NoError(t, cmds[4].Process.Signal(syscall.SIGKILL))
	require.NoError(t, waitExit(cmds[4], testtime.D(20*time.Second)))
	start = time.Now()
	_, err = c.Send(make([]byte, 8), 1, Int64, 5, 0)
	require.Error(t, err)
	require.Contains(t, err.Error(), "asking rank 5 (pid")
	require.True(t, errors.Is(err, syscall.ECONNREFUSED), "%v", err)
	require.Less(t, time.Since(start), testtime.D(10*time.Second), "a refused connection fails at once, not at the timeout")

	// The links made at init are untouched by the failures.
	require.True(t, slices.Equal([]int{1, 2, 7}, c.peers.connected()))
}

// A collective that needs a link to a rank that is gone fails, naming that rank, on
// the ranks that try to make it.
func TestCollectiveNeedsLinkToGoneRank(t *testing.T) {
	const n = 8
	comms := initComms(t, n, "", testtime.D(3*time.Second))
	require.NoError(t, comms[4].Abort())
	var live []*Comm
	for _, c := range comms {
		if c.rank != 4 {
			live = append(live, c)
		}
	}
	errs := onAll(t, live, func(c *Comm) (*Request, error) {
		return c.AlltoAll(make([]byte, 8*n), make([]byte, 8*n), 1, Int64)
	})
	named := 0
	for i, err := range errs {
		require.Error(t, err, "rank %d", live[i].rank)
		if strings.Contains(err.Error(), "asking rank 4 (pid") || strings.Contains(err.Error(), "connecting to rank 4 (pid") {
			named++
		}
	}
	require.Positive(t, named, "no rank named rank 4: %v", errs)
}

// waitExit waits up to d for cmd's process to end (it is reaped by the cleanup that
// spawnRanksWith registered).
func waitExit(cmd *osexec.Cmd, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(cmd.Process.Pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		var ws syscall.WaitStatus
		if pid, _ := syscall.Wait4(cmd.Process.Pid, &ws, syscall.WNOHANG, nil); pid == cmd.Process.Pid {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("pid %d still running after %v", cmd.Process.Pid, d)
}

// A rank that closes its communicator waits for its goodbyes to go out, even when its
// writers are slow to get a core (here 600 ms, as with 256 ranks on 2 cores): its
// peers then know it left rather than died, and their communicator stays usable. When
// closing gave up after 200 ms, the peers saw the connection end without a goodbye,
// took the rank for dead, and broke their communicator.
func TestGoodbyeOutlastsASlowWriter(t *testing.T) {
	comms := initCommsHooked(t, 3, "", 30*time.Second, &testHooks{byeDelay: 600 * time.Millisecond})
	for r, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(make([]byte, 8), make([]byte, 8), 1, Int64, Sum)
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	require.NoError(t, comms[2].Destroy())
	time.Sleep(failGrace + 300*time.Millisecond)
	for _, c := range comms[:2] {
		c.mu.Lock()
		lost := c.lost
		c.mu.Unlock()
		require.NoError(t, lost, "rank %d took rank 2, which closed its communicator, for lost", c.rank)
	}
	recv, err := comms[1].Recv(make([]byte, 8), 1, Int64, 0, 7)
	require.NoError(t, err)
	send, err := comms[0].Send(make([]byte, 8), 1, Int64, 1, 7)
	require.NoError(t, err)
	for _, req := range []*Request{send, recv} {
		_, err := req.Wait(testtime.D(10 * time.Second))
		require.NoError(t, err, "ranks 0 and 1 after rank 2 closed its communicator")
	}
}

// Ranks that close their communicators at the same time do not wait out byeWait: a
// goodbye that can no longer go out (the peer hung up first, after its own goodbye)
// ends the wait for it. Closing waited the full 2 s for such a goodbye, so a rank
// arrived at the next new_group 2 s late and a group with a 2 s timeout failed to form.
func TestClosingTogetherReturnsPromptly(t *testing.T) {
	for round := 0; round < 3; round++ {
		comms := initCommsHooked(t, 3, "", 30*time.Second, &testHooks{byeDelay: 100 * time.Millisecond})
		for r, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
			return c.AllReduce(make([]byte, 8), make([]byte, 8), 1, Int64, Sum)
		}) {
			require.NoError(t, err, "rank %d", r)
		}
		took := make([]time.Duration, len(comms))
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				if err := c.Destroy(); err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				took[r] = time.Since(start)
			}()
		}
		wg.Wait()
		for r, d := range took {
			require.Less(t, d, byeWait, "round %d: rank %d waited out byeWait for goodbyes that could not go out", round, r)
		}
	}
}
