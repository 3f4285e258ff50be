package core

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const badSize = "gonccl: all_gather: output tensor 0 has 4 elements, expected 5"

// A rank that refuses a collective its peers made (its own check failed) makes their
// operation fail at once, naming it and its reason, whether the word arrives before
// the peers call or while they wait in the call, and even if the refusing rank dies
// right after: not "lost rank" at the timeout.
func TestRefusalFailsThePeersCall(t *testing.T) {
	for _, tc := range []struct {
		n        int
		inFlight bool // the peers are in the call when the word comes, or call after
		dies     bool // the refusing rank's process ends right after
	}{{2, false, false}, {2, true, false}, {2, true, true}, {3, true, false}, {3, false, true}} {
		t.Run(fmt.Sprintf("n=%d,in_flight=%v,dies=%v", tc.n, tc.inFlight, tc.dies), func(t *testing.T) {
			comms := initAllTimeout(t, tc.n, 60*time.Second)
			refuser := tc.n - 1
			count := 1000
			bufs := make([][]byte, tc.n)
			for r := range bufs {
				bufs[r] = make([]byte, 4*count*tc.n)
			}
			// All ranks agree on collective #1.
			for _, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
				return c.AllReduce(bufs[c.rank][:4*count], bufs[c.rank][:4*count], count, Float32, Sum)
			}) {
				require.NoError(t, err)
			}
			refuse := func() {
				require.NoError(t, comms[refuser].Refuse(KindAllGather, badSize))
				if tc.dies {
					die(comms[refuser])
				}
			}
			if tc.inFlight {
				time.AfterFunc(300*time.Millisecond, refuse)
			} else {
				refuse()
			}
			start := time.Now()
			callers := comms[:refuser]
			for i, err := range onAll(t, callers, func(c *Comm) (*Request, error) {
				return c.AllGather(bufs[c.rank][4*count*c.rank:4*count*(c.rank+1)], bufs[c.rank], count, Float32)
			}) {
				var oe *OpError
				require.True(t, errors.As(err, &oe), "rank %d: %v", i, err)
				want := fmt.Sprintf("rank %d refused all_gather #2: %s", refuser, strings.TrimPrefix(badSize, "gonccl: "))
				require.Equal(t, want, oe.Err.Error(), "rank %d: %v", i, err)
				require.Contains(t, oe.Op, "all_gather #2")
				require.ErrorIs(t, err, ErrMismatch)
				require.Empty(t, oe.Diagnosis, "the refusal says it all")
			}
			require.Less(t, time.Since(start), 10*time.Second)
			// Their communicator is broken with it, as after any failed collective.
			for _, c := range callers {
				require.ErrorContains(t, c.Err(), fmt.Sprintf("rank %d refused all_gather #2", refuser))
			}
			for _, c := range comms {
				require.NoError(t, c.Abort())
			}
		})
	}
}

// Ranks that all refuse the same call (the same bad tensor on every rank) stay in step
// and their communicator stays usable, in whichever order the words and the refusals
// come: each drops the others' word of a number it refused too.
func TestAllRefusingStayInStep(t *testing.T) {
	for _, lag := range []time.Duration{0, 300 * time.Millisecond} {
		t.Run(fmt.Sprintf("lag=%v", lag), func(t *testing.T) {
			comms := initAllTimeout(t, 3, 30*time.Second)
			for round := 0; round < 3; round++ {
				for _, c := range comms {
					if c.rank == 2 {
						time.Sleep(lag) // the others' words come before rank 2 refuses
					}
					require.NoError(t, c.Refuse(KindAllReduce, "gonccl: all_reduce: dtype torch.complex32 is not supported"))
				}
				count := 257
				bufs := make([][]byte, len(comms))
				for _, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
					bufs[c.rank] = float32Bytes(count, float32(c.rank+1))
					return c.AllReduce(bufs[c.rank], bufs[c.rank], count, Float32, Sum)
				}) {
					require.NoError(t, err)
				}
				for _, b := range bufs {
					require.Equal(t, float32Bytes(count, 6), b)
				}
			}
			for _, c := range comms {
				require.NoError(t, c.Err())
				require.True(t, c.idle(), "refused calls count as finished")
				require.Empty(t, c.refusals)
				require.NoError(t, c.Destroy())
			}
		})
	}
}

// A refusal of a call the peer has already finished (a broadcast's root, whose sends
// did not need the refusing rank) leaves the ranks out of step: the root's
// communicator breaks with it, so that its next call says why.
func TestRefusalAfterTheRootFinished(t *testing.T) {
	comms := initAllTimeout(t, 2, 30*time.Second)
	buf := float32Bytes(16, 1)
	req, err := comms[0].Broadcast(buf, buf, 16, Float32, 0)
	require.NoError(t, err)
	_, err = req.Wait(-1)
	require.NoError(t, err, "the root's sends are buffered: it does not wait for rank 1")
	require.NoError(t, comms[1].Refuse(KindBroadcast, "gonccl: broadcast: tensor must be contiguous"))
	require.Eventually(t, func() bool { return comms[0].Err() != nil }, 10*time.Second, 10*time.Millisecond)
	require.ErrorContains(t, comms[0].Err(), "rank 1 refused broadcast #1: broadcast: tensor must be contiguous")
	_, err = comms[0].Barrier()
	if err == nil {
		err = comms[0].Err()
	}
	require.ErrorContains(t, err, "rank 1 refused broadcast #1")
	for _, c := range comms {
		require.NoError(t, c.Abort())
	}
}

func TestRefuseChecksItsArguments(t *testing.T) {
	comms := initAll(t, 1)
	require.ErrorIs(t, comms[0].Refuse(KindSend, "x"), ErrInvalidArgument)
	require.ErrorIs(t, comms[0].Refuse(Kind(0), "x"), ErrInvalidArgument)
	require.NoError(t, comms[0].Refuse(KindBarrier, "alone, nobody to tell"))
	req, err := comms[0].Barrier()
	require.NoError(t, err)
	_, err = req.Wait(-1)
	require.NoError(t, err)
	require.Equal(t, uint64(2), comms[0].status().Issued, "the refusal used up #1")
	tr := comms[0].Trace()
	require.Len(t, tr, 2)
	require.Equal(t, TraceRefused, tr[0].State)
	require.Equal(t, "refused here: alone, nobody to tell", tr[0].Err)
	require.Equal(t, TraceCompleted, tr[1].State)
	require.NoError(t, comms[0].Destroy())
	require.ErrorIs(t, comms[0].Refuse(KindBarrier, "x"), ErrClosed)
}

// float32Bytes is count float32 elements of value v.
func float32Bytes(count int, v float32) []byte {
	vals := make([]float32, count)
	for i := range vals {
		vals[i] = v
	}
	return f32bytes(vals)
}
