package core

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runOn issues one operation on each listed rank and returns every rank's error (nil
// for ranks not listed), waiting at most limit.
func runOn(t *testing.T, comms []*Comm, ranks []int, limit time.Duration, issue func(c *Comm) (*Request, error)) map[int]error {
	t.Helper()
	var mu sync.Mutex
	errs := map[int]error{}
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := issue(comms[r])
			if err == nil {
				var done bool
				done, err = req.Wait(limit)
				if !done {
					err = fmt.Errorf("rank %d: still running after %v", r, limit)
				}
			}
			mu.Lock()
			errs[r] = err
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errs
}

func allReduceOn(c *Comm) (*Request, error) {
	b := make([]byte, 4096)
	return c.AllReduce(b, b, 1024, Float32, Sum)
}

// A rank that never calls the collective is named by every rank that waits for it,
// within the timeout plus the diagnosis, whoever each rank was waiting on directly.
func TestTimeoutNamesTheMissingRank(t *testing.T) {
	const n = 4
	comms := initAllTimeout(t, n, 2*time.Second)
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	// one operation everyone joins, then one rank 2 skips
	errs := runOn(t, comms, []int{0, 1, 2, 3}, 10*time.Second, allReduceOn)
	for r := 0; r < n; r++ {
		require.NoError(t, errs[r])
	}
	start := time.Now()
	errs = runOn(t, comms, []int{0, 1, 3}, 15*time.Second, allReduceOn)
	took := time.Since(start)
	for _, r := range []int{0, 1, 3} {
		require.ErrorIs(t, errs[r], ErrTimeout, "rank %d", r)
		msg := errs[r].Error()
		require.Contains(t, msg, "missing: rank 2", "rank %d: %s", r, msg)
		require.Contains(t, msg, "rank 2 has not called operation #2 (its last call: all_reduce #1 (float32 x 1024, sum))", "rank %d: %s", r, msg)
		require.Contains(t, msg, "all_reduce #2", "rank %d: %s", r, msg)
	}
	require.Less(t, took, 2*time.Second+statusWait+3*time.Second, "errors came too late")
}

// Ranks that call a reduce with different roots (no frame may ever pass between them)
// learn both sides instead of only a timeout.
func TestDifferentRootsAreNamed(t *testing.T) {
	const n = 3
	comms := initAllTimeout(t, n, 2*time.Second)
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	errs := runOn(t, comms, []int{0, 1, 2}, 15*time.Second, func(c *Comm) (*Request, error) {
		b := make([]byte, 64)
		root := 0
		if c.rank == 2 {
			root = 1
		}
		return c.Reduce(b, b, 16, Float32, Sum, root)
	})
	// Rank 1 sends its part to root 0 and rank 2 its part to root 1, and both are done
	// (non-roots have no result); rank 0 waits for rank 2's part and must say why.
	for _, r := range []int{0} {
		require.Error(t, errs[r], "rank %d", r)
		msg := errs[r].Error()
		require.Contains(t, msg, "root 1", "rank %d: %s", r, msg)
		require.Contains(t, msg, "root 0", "rank %d: %s", r, msg)
	}
}

// When one rank closes its communicator (abort), the others name it and say it left
// on purpose, not just the neighbour that failed after it. (A rank that dies without a
// goodbye is "gone": tests/test_faults.py kills one.)
func TestDeadRankIsNamed(t *testing.T) {
	const n = 4
	comms := initAllTimeout(t, n, 5*time.Second)
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	require.NoError(t, comms[2].Abort()) // closes every connection, as an exit would
	errs := runOn(t, comms, []int{0, 1, 3}, 20*time.Second, allReduceOn)
	for _, r := range []int{0, 1, 3} {
		require.Error(t, errs[r], "rank %d", r)
		msg := errs[r].Error()
		require.Contains(t, msg, "rank 2 left: aborted", "rank %d: %s", r, msg)
		require.NotContains(t, msg, "gone:", "rank %d: %s", r, msg)
	}
}

// With no peer failing, a mismatch between two ranks is explained on the ranks that
// did not see the bad frame too.
func TestMismatchExplainedOnEveryRank(t *testing.T) {
	const n = 3
	comms := initAllTimeout(t, n, 3*time.Second)
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	errs := runOn(t, comms, []int{0, 1, 2}, 15*time.Second, func(c *Comm) (*Request, error) {
		count := 1024
		if c.rank == 1 {
			count = 2048
		}
		b := make([]byte, 4*count)
		return c.AllReduce(b, b, count, Float32, Sum)
	})
	for r := 0; r < n; r++ {
		require.Error(t, errs[r], "rank %d", r)
		msg := errs[r].Error()
		require.Contains(t, msg, "float32 x 2048", "rank %d: %s", r, msg)
		require.Contains(t, msg, "float32 x 1024", "rank %d: %s", r, msg)
	}
}

// A peer that goes silent without closing anything (hung, stopped, network cut) is
// declared gone after the heartbeat timeout, and a collective waiting on it fails then,
// naming it, long before the operation's own timeout.
func TestSilentPeerMissesHeartbeats(t *testing.T) {
	t.Setenv("GONCCL_HEARTBEAT_TIMEOUT_MS", "1000")
	var silent atomic.Bool
	comms := initAllHooked(t, 3, 30*time.Second, &testHooks{heartbeatsPaused: func(rank int) bool { return rank == 2 && silent.Load() }})
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	silent.Store(true) // rank 2 falls silent
	start := time.Now()
	errs := runOn(t, comms, []int{0, 1}, 20*time.Second, allReduceOn)
	took := time.Since(start)
	for _, r := range []int{0, 1} {
		require.Error(t, errs[r], "rank %d", r)
		msg := errs[r].Error()
		require.Contains(t, msg, "gone: rank 2", "rank %d: %s", r, msg)
		require.Contains(t, msg, "missed heartbeats", "rank %d: %s", r, msg)
	}
	require.Less(t, took, 10*time.Second, "the silent peer was noticed only after %v", took)
}
