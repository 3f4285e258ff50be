package core

import (
	"testing"

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
