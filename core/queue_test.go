package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Far more asynchronous operations than the queue holds, issued before any is waited
// for: issuing blocks while the queue is full (back-pressure) and every result is
// exact. The queue used to be sent to under the communicator's mutex, which the
// executor needs to finish an operation: both ranks hung at the 1,025th operation.
func TestQueueBackPressure(t *testing.T) {
	for _, depth := range []int{1, 8, 1024} {
		t.Run(fmt.Sprint("depth", depth), func(t *testing.T) {
			const n = 1100
			comms := memComms(t, 2, func(cfg *config) { cfg.queueDepth = depth })
			bufs := make([][][]byte, len(comms))
			errs := onRanks(comms, func(c *Comm) error {
				reqs := make([]*Request, n)
				bufs[c.rank] = make([][]byte, n)
				for i := range reqs {
					b := make([]byte, 8)
					binary.LittleEndian.PutUint64(b, uint64(i*10+c.rank+1))
					bufs[c.rank][i] = b
					req, err := c.AllReduce(b, b, 1, Int64, Sum)
					if err != nil {
						return fmt.Errorf("issuing #%d: %w", i, err)
					}
					reqs[i] = req
				}
				for i, req := range reqs {
					if done, err := req.Wait(30 * time.Second); !done || err != nil {
						return fmt.Errorf("#%d: done %v, %v", i, done, err)
					}
				}
				return nil
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			for r := range comms {
				for i, b := range bufs[r] {
					require.Equal(t, uint64(2*i*10+3), binary.LittleEndian.Uint64(b), "rank %d op %d", r, i)
				}
			}
		})
	}
}

// stuckComm is a one-rank communicator with a queue of depth whose first operation
// blocks in its Before hook until release is called, and whose queue is then filled.
func stuckComm(t *testing.T, depth int, timeout time.Duration) (c *Comm, release func(), reqs []*Request) {
	comms := memComms(t, 1, func(cfg *config) { cfg.queueDepth, cfg.timeout = depth, timeout })
	c = comms[0]
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	started := make(chan struct{})
	b := make([]byte, 4)
	req, err := c.AllReduce(b, b, 1, Float32, Sum, WithHooks(Hooks{Before: func(time.Time) error {
		close(started)
		<-gate
		return nil
	}}))
	require.NoError(t, err)
	<-started
	reqs = append(reqs, req)
	for i := 0; i < depth; i++ {
		req, err := c.AllReduce(b, b, 1, Float32, Sum)
		require.NoError(t, err)
		reqs = append(reqs, req)
	}
	return c, release, reqs
}

// An operation issued on a full queue that never drains fails after the operation
// timeout with a timeout error that says what it waited for; nothing was enqueued.
func TestQueueFullTimesOut(t *testing.T) {
	c, release, reqs := stuckComm(t, 2, 300*time.Millisecond)
	b := make([]byte, 4)
	start := time.Now()
	_, err := c.AllReduce(b, b, 1, Float32, Sum)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "room in the operation queue")
	require.ErrorContains(t, err, "GONCCL_QUEUE_DEPTH")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	release()
	for _, req := range reqs {
		done, err := req.Wait(10 * time.Second)
		require.True(t, done)
		require.NoError(t, err)
	}
	// The failed issue left no gap: the next operation runs as #4.
	req, err := c.AllReduce(b, b, 1, Float32, Sum)
	require.NoError(t, err)
	done, err := req.Wait(10 * time.Second)
	require.True(t, done)
	require.NoError(t, err)
	require.Equal(t, uint64(len(reqs)+1), c.status().Finished)
}

// Abort and Destroy wake an issuer blocked on a full queue at once, even while the
// executor is stuck in an operation.
func TestQueueFullWokenByClose(t *testing.T) {
	for _, how := range []string{"abort", "destroy"} {
		t.Run(how, func(t *testing.T) {
			c, release, reqs := stuckComm(t, 4, time.Minute)
			issued := make(chan error, 1)
			go func() {
				b := make([]byte, 4)
				_, err := c.AllReduce(b, b, 1, Float32, Sum)
				issued <- err
			}()
			time.Sleep(50 * time.Millisecond) // let it block (the test passes either way)
			closed := make(chan error, 1)
			go func() {
				if how == "abort" {
					closed <- c.Abort()
				} else {
					closed <- c.Destroy()
				}
			}()
			select {
			case err := <-issued:
				want := ErrClosed
				if how == "abort" {
					want = ErrAborted
				}
				require.ErrorIs(t, err, want)
			case <-time.After(10 * time.Second):
				t.Fatal("the blocked issuer was not woken")
			}
			release()
			require.NoError(t, <-closed)
			for _, req := range reqs {
				done, err := req.Wait(10 * time.Second)
				require.True(t, done)
				if how == "destroy" {
					require.NoError(t, err)
				} else if err != nil {
					require.True(t, errors.Is(err, ErrAborted), "%v", err)
				}
			}
		})
	}
}
