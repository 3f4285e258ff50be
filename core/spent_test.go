package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A timeout of zero or less is a deadline already passed, not a bad argument: a caller
// that passes the time left before its own deadline must get a timeout, not a refusal.
func TestSpentTimeoutIsAccepted(t *testing.T) {
	comms := memComms(t, 2, nil)
	for _, d := range []time.Duration{0, -time.Nanosecond, -time.Hour} {
		require.NoError(t, comms[0].SetTimeout(d), "SetTimeout(%v)", d)
		require.Equal(t, time.Duration(0), comms[0].Timeout(), "SetTimeout(%v)", d)
	}
}

// A collective enqueued with a spent deadline that rank 1 never joins times out at
// once, naming rank 1, instead of waiting for the communicator's 20 s.
func TestSpentTimeoutCollectiveTimesOutAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Millisecond} {
		comms := memComms(t, 2, nil)
		require.NoError(t, comms[0].SetTimeout(d))
		buf := make([]byte, 4)
		start := time.Now()
		req, err := comms[0].AllReduce(buf, buf, 1, Float32, Sum)
		require.NoError(t, err)
		err = wait(t, req, "all_reduce with a spent deadline")
		require.ErrorIs(t, err, ErrTimeout)
		require.ErrorContains(t, err, "waiting for rank 1")
		require.Less(t, time.Since(start), 5*time.Second)
	}
}

// A receive with a spent deadline and no message fails at once naming its peer; one
// whose message has already arrived completes with it.
func TestSpentTimeoutReceive(t *testing.T) {
	comms := memP2P(t, 2)
	require.NoError(t, comms[0].SetTimeout(0))
	buf := make([]byte, 4)
	start := time.Now()
	req, err := comms[0].Recv(buf, 1, Float32, 1, 5)
	require.NoError(t, err)
	err = wait(t, req, "a receive with a spent deadline")
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "rank 1")
	require.Less(t, time.Since(start), 5*time.Second)

	// The message of tag 6 arrives before the receive is posted (it waits, unexpected).
	sent := []byte{1, 2, 3, 4}
	sreq, err := comms[1].Send(sent, 1, Float32, 0, 6)
	require.NoError(t, err)
	require.NoError(t, wait(t, sreq, "send"))
	require.Eventually(t, func() bool {
		comms[0].p2p.mu.Lock()
		defer comms[0].p2p.mu.Unlock()
		for _, u := range comms[0].p2p.unexpected {
			if u.from == 1 && u.h.Tag == 6 {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "the message never arrived")
	got := make([]byte, 4)
	rreq, err := comms[0].Recv(got, 1, Float32, 1, 6)
	require.NoError(t, err)
	require.NoError(t, wait(t, rreq, "a receive with a spent deadline whose message has arrived"))
	require.Equal(t, sent, got)
}
