package core

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Suspend frees scratch, work memory and the shared-memory send rings; operations
// are refused until Resume, and run correctly after it.
func TestSuspendFreesAndResumeRestores(t *testing.T) {
	const n, count = 2, 4096
	comms := shmComms(t, n, 1<<16, nil)
	run := func() []error {
		ins := make([][]byte, n)
		outs := make([][]byte, n)
		for r := range ins {
			ins[r] = inputs(Float32, Sum, count, r, 1)
			outs[r] = make([]byte, len(ins[r]))
		}
		errs := onAll(t, comms, func(c *Comm) (*Request, error) {
			return c.AllReduce(ins[c.rank], outs[c.rank], count, Float32, Sum)
		})
		if errs[0] == nil {
			want := reference(Float32, Sum, ins, count)
			for r := range outs {
				require.Equal(t, want, outs[r])
			}
		}
		return errs
	}
	for _, err := range run() {
		require.NoError(t, err)
	}
	for _, c := range comms {
		m := c.Memory()
		require.Positive(t, m.Scratch)
		require.Equal(t, int64(1<<16), m.ShmRing)
	}
	for _, c := range comms {
		require.NoError(t, c.Suspend())
		require.True(t, c.Suspended())
		require.Equal(t, MemoryStats{}, c.Memory())
	}
	require.ErrorIs(t, comms[0].Suspend(), ErrSuspended)
	_, err := comms[0].AllReduce(make([]byte, 4), make([]byte, 4), 1, Float32, Sum)
	require.ErrorIs(t, err, ErrSuspended)
	require.ErrorContains(t, err, "suspended")
	for _, c := range comms {
		require.NoError(t, c.Resume())
	}
	require.ErrorIs(t, comms[0].Resume(), ErrInvalidArgument)
	for _, err := range run() {
		require.NoError(t, err)
	}
	require.Positive(t, comms[1].Memory().Scratch)
}
