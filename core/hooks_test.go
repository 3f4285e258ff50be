package core

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHooksRunAroundTheOperation: Before fills the input just before the algorithm
// runs (after the op was issued), After sees the result and the op's error, and the
// request completes only after After.
func TestHooksRunAroundTheOperation(t *testing.T) {
	comms := memComms(t, 3, nil)
	bufs := make([][]byte, 3)
	seen := make([]float64, 3)
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		b := make([]byte, 4*8)
		bufs[c.rank] = b
		return c.AllReduce(b, b, 8, Float32, Sum, WithHooks(Hooks{
			Before: func(deadline time.Time) error {
				require.False(t, deadline.IsZero())
				for i := 0; i < 8; i++ {
					putElem(b, Float32, i, float64(c.rank+1))
				}
				return nil
			},
			After: func(opErr error) error {
				require.NoError(t, opErr)
				seen[c.rank] = getElem(b, Float32, 7)
				return nil
			},
		}))
	})
	for r, err := range errs {
		require.NoError(t, err)
		require.Equal(t, 6.0, seen[r], "rank %d: After ran before the result was in", r)
	}
}

// TestHookErrors: a Before failure fails the op on every rank (peers are released, not
// left waiting) and After still runs with it; an After failure fails only its request
// and leaves the communicator usable.
func TestHookErrors(t *testing.T) {
	comms := memComms(t, 2, nil)
	bad := errors.New("staging failed")
	var afterErr error
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		b := make([]byte, 4)
		if c.rank == 1 {
			return c.Broadcast(b, b, 1, Float32, 0, WithHooks(Hooks{
				Before: func(time.Time) error { return bad },
				After:  func(err error) error { afterErr = err; return nil },
			}))
		}
		return c.Broadcast(b, b, 1, Float32, 0)
	})
	require.ErrorIs(t, errs[1], bad)
	require.ErrorIs(t, afterErr, bad)
	require.Error(t, errs[0], "rank 0 must not succeed while rank 1 failed before the algorithm")

	comms = memComms(t, 2, nil)
	errs = onAll(t, comms, func(c *Comm) (*Request, error) {
		b := make([]byte, 4)
		return c.AllGather(b[:2], b, 1, Int16, WithHooks(Hooks{After: func(error) error {
			if c.rank == 0 {
				return bad
			}
			return nil
		}}))
	})
	require.ErrorIs(t, errs[0], bad)
	require.NoError(t, errs[1])
	errs = onAll(t, comms, func(c *Comm) (*Request, error) { return c.Barrier() })
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
}

// TestWireCount: an operation's frames carry WithWireCount's count instead of its own
// (a chunk of a larger operation, capi's pipelined staging): ranks whose chunks carry the
// same whole count agree, and a rank calling an operation of the chunk's own size on the
// other side is a mismatch naming both counts.
func TestWireCount(t *testing.T) {
	comms := memComms(t, 2, nil)
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		b := make([]byte, 4*8)
		return c.AllReduce(b, b, 8, Float32, Sum, WithWireCount(1000))
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	errs = onAll(t, comms, func(c *Comm) (*Request, error) {
		b := make([]byte, 4*8)
		if c.rank == 0 {
			return c.AllReduce(b, b, 8, Float32, Sum, WithWireCount(1000))
		}
		return c.AllReduce(b, b, 8, Float32, Sum)
	})
	require.ErrorIs(t, errors.Join(errs...), ErrMismatch)
	require.ErrorContains(t, errors.Join(errs...), "float32 x 1000, sum")
	require.ErrorContains(t, errors.Join(errs...), "float32 x 8, sum")
}
