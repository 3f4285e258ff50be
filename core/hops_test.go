package core

import (
	"fmt"
	"github.com/gonccl/gonccl/internal/testtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHopsCountEveryOp: with hop timing on, every operation passes every hop of the
// executor's path once per rank, and a reset empties the sums.
func TestHopsCountEveryOp(t *testing.T) {
	comms := memComms(t, 2, func(c *config) { c.debugHops = true })
	HopStats(true)
	const n = 50
	for k := 0; k < n; k++ {
		errs := onAll(t, comms, func(c *Comm) (*Request, error) {
			b := make([]byte, 8)
			return c.AllReduce(b, b, 2, Float32, Sum)
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
	}
	stats := HopStats(true)
	for _, h := range []Hop{HopEnqueue, HopQueue, HopRun, HopFinish, HopWake} {
		require.GreaterOrEqual(t, stats[h].Count, int64(2*n), "hop %s", h)
		require.Positive(t, stats[h].Total, "hop %s", h)
	}
	for _, s := range HopStats(false) {
		require.Zero(t, s.Count, "hop %s after a reset", s.Hop)
	}
}

// TestSpinnerAdapts: the poll budget grows while polls succeed, shrinks to the floor
// while they fail, and GONCCL_FAST_PATH=0 turns polling off.
func TestSpinnerAdapts(t *testing.T) {
	var s spinner
	require.True(t, s.spin(func() bool { return true }))
	require.Equal(t, int64(2*minWaitSpin), s.budget.Load())
	for range 10 {
		s.spin(func() bool { return true })
	}
	require.Equal(t, int64(maxWaitSpin), s.budget.Load())
	for range 10 {
		require.False(t, s.spin(func() bool { return false }))
	}
	require.Equal(t, int64(minWaitSpin), s.budget.Load())
	noSpin.Store(true)
	defer noSpin.Store(false)
	polled := false
	require.False(t, s.spin(func() bool { polled = true; return true }))
	require.False(t, polled)
}

// TestWaitersRunQueuedOpsInOrder: ops a waiter runs on its own goroutine (inline.go)
// still run one at a time in issue order on every rank, whoever runs them: each rank
// issues ops of growing sizes (a different order on two ranks would be a mismatch, and
// two at once would corrupt the shared scratch memory), then rank 0 waits newest first
// (its waiter runs them all) while rank 1 waits oldest first, from two goroutines.
func TestWaitersRunQueuedOpsInOrder(t *testing.T) {
	for _, executorOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("executorOnly=%v", executorOnly), func(t *testing.T) { waitersRunQueuedOpsInOrder(t, executorOnly) })
	}
}

// waitersRunQueuedOpsInOrder is TestWaitersRunQueuedOpsInOrder; with executorOnly (a
// host whose ranks outnumber its cores 8 to 1) the waiters leave every operation to
// the executor, which must run them all though nobody kicks it for the waited ones.
func waitersRunQueuedOpsInOrder(t *testing.T, executorOnly bool) {
	comms := memComms(t, 2, nil)
	for _, c := range comms {
		c.executorOnly = executorOnly
	}
	const n = 60
	bufs := make([][][]byte, 2)
	reqs := make([][]*Request, 2)
	for r, c := range comms {
		for k := 0; k < n; k++ {
			b := make([]byte, 4*(k+1))
			for i := 0; i <= k; i++ {
				putElem(b, Float32, i, float64(k+r))
			}
			var opts []OpOption
			if executorOnly { // said by blocking callers: the executor must be woken all the same
				opts = append(opts, WaitedAtOnce())
			}
			req, err := c.AllReduce(b, b, k+1, Float32, Sum, opts...)
			require.NoError(t, err)
			bufs[r] = append(bufs[r], b)
			reqs[r] = append(reqs[r], req)
		}
	}
	errs := make(chan error, 2*n)
	wait := func(req *Request) {
		done, err := req.Wait(-1) // no timeout of its own: it may run ops (the ops' 20 s deadline bounds it)
		if !done {
			err = fmt.Errorf("request did not finish")
		}
		errs <- err
	}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		for k := n - 1; k >= 0; k-- {
			wait(reqs[0][k])
		}
	}()
	for g := 0; g < 2; g++ {
		go func() {
			defer wg.Done()
			for k := g; k < n; k += 2 {
				wait(reqs[1][k])
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for r := range comms {
		for k := 0; k < n; k++ {
			for i := 0; i <= k; i++ {
				require.Equal(t, float64(2*k+1), getElem(bufs[r][k], Float32, i), "rank %d op %d element %d", r, k, i)
			}
		}
	}
}

// TestTimedWaitNeverRunsOp: a wait with a timeout of its own comes back when the
// timeout passes, even when nobody else is running the queue: it never runs the
// operation itself (inline.go), since it could not return before the operation ends.
// Each operation blocks in its Before hook until the test has seen its wait time out
// (or, if a waiter ran it, until the operation's deadline).
func TestTimedWaitNeverRunsOp(t *testing.T) {
	c := memComms(t, 1, func(cfg *config) { cfg.timeout = 5 * time.Second })[0]
	for k := 0; k < 20; k++ {
		release := make(chan struct{})
		hold := Hooks{Before: func(deadline time.Time) error {
			select {
			case <-release:
			case <-time.After(time.Until(deadline)):
			}
			return nil
		}}
		b := make([]byte, 8)
		req, err := c.AllReduce(b, b, 2, Float32, Sum, WithHooks(hold))
		require.NoError(t, err)
		done, _ := req.Wait(time.Millisecond)
		close(release)
		require.False(t, done, "op %d: a wait with a 1 ms timeout returned only once the op had ended", k)
		done, err = req.Wait(-1)
		require.True(t, done)
		require.NoError(t, err)
	}
}

// TestWaitedAtOnceOpRunsWhileAnotherWaiterHoldsTheQueue: an operation issued with
// WaitedAtOnce does not wake the executor, so it must still run when its waiter
// cannot run it because another waiter is running the queue: that one, done with its
// own operation, leaves the queue to the executor. On each rank goroutine X waits for
// op A, which X runs and which is held in its Before hook until op B has been issued
// (WaitedAtOnce) and its waiter Y has found the queue taken; then A goes on and B must
// finish too.
func TestWaitedAtOnceOpRunsWhileAnotherWaiterHoldsTheQueue(t *testing.T) {
	comms := memComms(t, 2, func(cfg *config) { cfg.timeout = testtime.D(20 * time.Second) })
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started, release := make(chan struct{}), make(chan struct{})
			hold := Hooks{Before: func(time.Time) error { close(started); <-release; return nil }}
			a := make([]byte, 8)
			putElem(a, Float32, 0, float64(r))
			reqA, err := c.AllReduce(a, a, 2, Float32, Sum, WithHooks(hold))
			if err != nil {
				errs <- err
				return
			}
			doneA := make(chan error, 1)
			go func() { _, err := reqA.Wait(-1); doneA <- err }() // X: runs A
			<-started
			b := make([]byte, 8)
			putElem(b, Float32, 0, float64(10*r+1))
			reqB, err := c.AllReduce(b, b, 2, Float32, Sum, WaitedAtOnce())
			if err != nil {
				errs <- err
				return
			}
			doneB := make(chan error, 1)
			go func() { _, err := reqB.Wait(-1); doneB <- err }() // Y: finds the queue taken
			time.Sleep(20 * time.Millisecond)
			close(release)
			errs <- <-doneA
			select {
			case err := <-doneB:
				if err == nil && getElem(b, Float32, 0) != 12 {
					err = fmt.Errorf("rank %d: op B gave %v, want 12", r, getElem(b, Float32, 0))
				}
				errs <- err
			case <-time.After(testtime.D(30 * time.Second)):
				errs <- fmt.Errorf("rank %d: op B never ran", r)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
