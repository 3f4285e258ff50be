package core

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A count whose byte size (or whose product with the rank count) overflows is refused
// with ErrInvalidArgument naming it, by every collective and by point-to-point, before
// anything is enqueued. On the old code 1<<62 float32 elements (1<<64 bytes, which
// wraps to 0) passed the buffer check with an empty buffer and a forced ring all_reduce
// then panicked on a slice index in the executor goroutine, killing the process.
func TestCountsThatOverflowAreRefused(t *testing.T) {
	comms := memP2PWith(t, 2, func(c *config) { c.algo[KindAllReduce] = []Algo{AlgoRing} })
	c := comms[0]
	b := []byte{}
	const huge = 1 << 62 // x 4 bytes = 1<<64: wraps to 0
	for _, tc := range []struct {
		name string
		call func() (*Request, error)
	}{
		{"all_reduce", func() (*Request, error) { return c.AllReduce(b, b, huge, Float32, Sum) }},
		{"all_reduce int8", func() (*Request, error) { return c.AllReduce(b, b, 1<<49, Int8, Sum) }},
		{"broadcast", func() (*Request, error) { return c.Broadcast(b, b, huge, Float32, 0) }},
		{"all_gather", func() (*Request, error) { return c.AllGather(b, b, huge/2, Float32) }},
		{"reduce", func() (*Request, error) { return c.Reduce(b, b, huge, Float32, Sum, 0) }},
		{"reduce_scatter", func() (*Request, error) { return c.ReduceScatter(b, b, huge/2, Float32, Sum) }},
		{"gather", func() (*Request, error) { return c.Gather(b, b, huge/2, Float32, 0) }},
		{"scatter", func() (*Request, error) { return c.Scatter(b, b, huge/2, Float32, 0) }},
		{"all_to_all", func() (*Request, error) { return c.AlltoAll(b, b, huge/2, Float32) }},
		{"send", func() (*Request, error) { return c.Send(b, huge, Float32, 1, 0) }},
		{"recv", func() (*Request, error) { return c.Recv(b, huge, Float32, 1, 0) }},
	} {
		req, err := tc.call()
		if err == nil { // the old code: it ran, and must at least not have succeeded
			_, err = waitErr(t, req)
		}
		require.ErrorIs(t, err, ErrInvalidArgument, tc.name)
		require.Contains(t, err.Error(), "overflows", tc.name)
	}
	// Nothing was sent: the communicator still works.
	require.NoError(t, onAll(t, comms, allReduceOfN(16))[0])
}
