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

// A send whose deadline has passed when its turn to be written comes times out and
// leaves the connection up: the writer must not write it with a deadline in the past,
// which fails the write and with it every later message to that peer.
func TestSpentTimeoutSendKeepsTheLink(t *testing.T) {
	comms := memP2P(t, 2)
	for i := 0; i < 100; i++ { // the old writer lost the race in about 1 round of 150
		require.NoError(t, comms[1].SetTimeout(0))
		req, err := comms[1].Send([]byte{1, 2, 3, 4}, 1, Float32, 0, 100+i)
		require.NoError(t, err)
		// It may have gone out before its timer fired; it must not fail any other way.
		if err := wait(t, req, "a send with a spent deadline"); err != nil {
			require.ErrorIs(t, err, ErrTimeout)
		}
		require.NoError(t, comms[1].SetTimeout(20*time.Second))
		sent := []byte{byte(i), 5, 6, 7}
		sreq, err := comms[1].Send(sent, 1, Float32, 0, 1000+i)
		require.NoError(t, err)
		got := make([]byte, 4)
		rreq, err := comms[0].Recv(got, 1, Float32, 1, 1000+i)
		require.NoError(t, err)
		require.NoError(t, wait(t, sreq, "the next send"), "round %d", i)
		require.NoError(t, wait(t, rreq, "the next receive"), "round %d", i)
		require.Equal(t, sent, got)
	}
}
