package core

import (
	"bytes"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// wait waits for req and returns its error, failing the test if it does not finish.
func wait(t *testing.T, req *Request, what string) error {
	t.Helper()
	done, err := req.Wait(30 * time.Second)
	require.True(t, done, "%s did not finish", what)
	return err
}

// pattern returns n bytes that depend on seed.
func pattern(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// onRanks runs fn on every rank concurrently and returns the errors.
func onRanks(comms []*Comm, fn func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

func destroyAll(t *testing.T, comms []*Comm) {
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
}

// Both ranks send first and receive second, with messages far larger than any socket
// buffer: this deadlocks if sends wait for their receive, or if receiving depends on
// the executor.
func TestP2PSymmetricLarge(t *testing.T) {
	comms := initAll(t, 2)
	defer destroyAll(t, comms)
	const n = 32 << 20
	errs := onRanks(comms, func(c *Comm) error {
		peer := 1 - c.rank
		out := pattern(n, int64(c.rank))
		in := make([]byte, n)
		s, err := c.Send(out, n, Uint8, peer, 0)
		if err != nil {
			return err
		}
		r, err := c.Recv(in, n, Uint8, peer, 0)
		if err != nil {
			return err
		}
		if err := wait(t, s, "send"); err != nil {
			return err
		}
		if err := wait(t, r, "recv"); err != nil {
			return err
		}
		if !bytes.Equal(in, pattern(n, int64(peer))) {
			return fmt.Errorf("rank %d: wrong data from rank %d", c.rank, peer)
		}
		if r.Source() != peer || s.Source() != peer {
			return fmt.Errorf("sources %d %d", r.Source(), s.Source())
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// Every rank sends to the next and receives from the previous, in both call orders and
// with sizes on both sides of the eager limit.
func TestP2PRing(t *testing.T) {
	for n := 2; n <= 6; n++ {
		comms := initAll(t, n)
		for _, size := range []int{0, 5, p2pEagerBytes, p2pEagerBytes + 1, 3 << 20} {
			for _, recvFirst := range []bool{false, true} {
				errs := onRanks(comms, func(c *Comm) error {
					next, prev := (c.rank+1)%n, (c.rank+n-1)%n
					out, in := pattern(size, int64(c.rank)), make([]byte, size)
					var s, r *Request
					var err error
					if recvFirst {
						r, err = c.Recv(in, size, Uint8, prev, 7)
					} else {
						s, err = c.Send(out, size, Uint8, next, 7)
					}
					if err != nil {
						return err
					}
					if recvFirst {
						s, err = c.Send(out, size, Uint8, next, 7)
					} else {
						r, err = c.Recv(in, size, Uint8, prev, 7)
					}
					if err != nil {
						return err
					}
					if err := wait(t, s, "send"); err != nil {
						return err
					}
					if err := wait(t, r, "recv"); err != nil {
						return err
					}
					if !bytes.Equal(in, pattern(size, int64(prev))) {
						return fmt.Errorf("rank %d: wrong data from rank %d", c.rank, prev)
					}
					return nil
				})
				for r, err := range errs {
					require.NoError(t, err, "n=%d size=%d recvFirst=%v rank %d", n, size, recvFirst, r)
				}
			}
		}
		destroyAll(t, comms)
	}
}
