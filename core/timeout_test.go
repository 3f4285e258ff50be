package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SetTimeout applies to operations enqueued after it: an all_reduce that rank 1 never
// joins fails after the new, short timeout, not the communicator's 20 s.
func TestSetTimeoutShortensLaterCollectives(t *testing.T) {
	comms := memComms(t, 2, nil)
	require.NoError(t, comms[0].SetTimeout(150*time.Millisecond))
	require.Equal(t, 150*time.Millisecond, comms[0].Timeout())
	buf := make([]byte, 4)
	start := time.Now()
	req, err := comms[0].AllReduce(buf, buf, 1, Float32, Sum)
	require.NoError(t, err)
	done, err := req.Wait(10 * time.Second)
	require.True(t, done, "all_reduce did not time out within 10 s")
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "Timed out after 150 ms")
	require.Less(t, time.Since(start), 10*time.Second)
}

// An operation keeps the timeout it was enqueued with.
func TestSetTimeoutKeepsEnqueuedTimeout(t *testing.T) {
	comms := memP2P(t, 2)
	require.NoError(t, comms[0].SetTimeout(100*time.Millisecond))
	buf := make([]byte, 4)
	short, err := comms[0].Recv(buf, 1, Float32, 1, 7)
	require.NoError(t, err)
	require.NoError(t, comms[0].SetTimeout(20*time.Second))
	long, err := comms[0].Recv(buf, 1, Float32, 1, 8)
	require.NoError(t, err)
	err = wait(t, short, "the short receive")
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "Timed out after 100 ms")
	ok, _ := long.Test()
	require.False(t, ok, "the receive enqueued with a 20 s timeout finished early")
	send := make([]byte, 4)
	sreq, err := comms[1].Send(send, 1, Float32, 0, 8)
	require.NoError(t, err)
	require.NoError(t, wait(t, sreq, "send"))
	require.NoError(t, wait(t, long, "the long receive"))
}
