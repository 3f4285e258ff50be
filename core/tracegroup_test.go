package core

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// groupedAllReduce issues, on c, an all_reduce of 8 floats, then one of 40 floats run
// as 5 all_reduces of 8 (a TraceGroup, as capi's pipelined staging issues them; if
// odd >= 0, chunk odd goes without its group's wire count: a mismatch), then a
// barrier, and waits for them; it returns the first error.
func groupedAllReduce(c *Comm, odd int) error {
	b := make([]byte, 4*8)
	reqs := []*Request{}
	r, err := c.AllReduce(b, b, 8, Float32, Sum)
	if err != nil {
		return err
	}
	reqs = append(reqs, r)
	g := NewTraceGroup(5)
	for k := 0; k < 5; k++ {
		opts := []OpOption{WithTraceGroup(g), WithWireCount(40)}
		if k == odd {
			opts = opts[:1]
		}
		r, err := c.AllReduce(make([]byte, 4*8), make([]byte, 4*8), 8, Float32, Sum, opts...)
		if err != nil {
			return err
		}
		reqs = append(reqs, r)
	}
	g.SetIssued(5)
	if r, err = c.Barrier(); err != nil {
		return err
	}
	reqs = append(reqs, r)
	var errs []error
	for _, r := range reqs {
		_, err := r.Wait(-1)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// TestTraceGroupIsOneEntry: the operations of a caller's collective that runs as
// several (a TraceGroup) are one flight-recorder entry, as the caller called it: its
// kind, count and number of chunks, from its first operation's number to its last
// one's, completed once they all have; the entries around it keep their numbers.
func TestTraceGroupIsOneEntry(t *testing.T) {
	comms := memComms(t, 2, func(c *config) { c.traceSize = 100 })
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		req, complete := PendingRequest()
		go func() { complete(groupedAllReduce(c, -1)) }()
		return req, nil
	})
	for r, c := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		got := c.Trace()
		require.Len(t, got, 3, "rank %d: %+v", r, got)
		require.Equal(t, uint64(1), got[0].Seq)
		require.Equal(t, uint64(8), got[0].Count)
		require.Zero(t, got[0].Chunks)
		g := got[1]
		require.Equal(t, KindAllReduce, g.Kind)
		require.Equal(t, uint64(2), g.Seq)
		require.Equal(t, uint64(6), g.LastSeq)
		require.Equal(t, 5, g.Chunks)
		require.Equal(t, uint64(40), g.Count)
		require.Equal(t, uint64(160), g.Bytes)
		require.Equal(t, Sum, g.RedOp)
		require.Equal(t, TraceCompleted, g.State)
		require.False(t, g.Started.IsZero() || g.Finished.IsZero() || g.Enqueued.IsZero())
		require.Equal(t, KindBarrier, got[2].Kind)
		require.Equal(t, uint64(7), got[2].Seq)
	}
}

// TestTraceGroupFails: a failure in one of a group's operations fails its entry with
// the error, which names the caller's collective beside the chunk's operation.
func TestTraceGroupFails(t *testing.T) {
	comms := memComms(t, 2, func(c *config) { c.traceSize = 100 })
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		req, complete := PendingRequest()
		odd := -1
		if c.rank == 1 {
			odd = 2
		}
		go func() { complete(groupedAllReduce(c, odd)) }()
		return req, nil
	})
	require.ErrorIs(t, errors.Join(errs...), ErrMismatch)
	require.ErrorContains(t, errors.Join(errs...), "part 3 of all_reduce #2 (float32 x 40, sum) in 5 chunks")
	for r, c := range comms {
		got := c.Trace()
		require.GreaterOrEqual(t, len(got), 2, "rank %d", r)
		g := got[1]
		require.Equal(t, 5, g.Chunks, "rank %d", r)
		require.Equal(t, TraceFailed, g.State, "rank %d", r)
		require.Contains(t, g.Err, "mismatch", "rank %d", r)
	}
}
