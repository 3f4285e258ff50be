package core

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// The estimate is the chosen algorithm's modelled time plus the call's fixed cost and
// the caller's copies,
// positive and growing with the size, and it runs nothing.
func TestEstimateFollowsTheModel(t *testing.T) {
	comms := shmComms(t, 3, 1<<16, nil)
	c := comms[0]
	for _, k := range []Kind{KindAllReduce, KindAllGather, KindReduceScatter, KindBroadcast, KindReduce, KindAlltoAll, KindBarrier, KindSendRecv} {
		prev := 0.0
		for b := 8; b <= 64<<20; b *= 8 {
			us, algo, err := c.Estimate(k, b)
			require.NoError(t, err, "%s %d", k, b)
			require.Greater(t, us, 0.0)
			require.GreaterOrEqual(t, us, prev, "%s: %d bytes estimated below a smaller message", k, b)
			prev = us
			if k == KindSendRecv {
				continue
			}
			best, ests := c.sel.evaluate(k, b)
			require.Equal(t, ests[best].algo, algo, "%s %d: not the algorithm the selector picks", k, b)
			require.InDelta(t, c.builtin(k, b, ests[best].us), us, 1e-9)
		}
	}
	before := c.seq
	_, _, err := c.Estimate(KindAllReduce, 1<<20)
	require.NoError(t, err)
	require.Equal(t, before, c.seq, "an estimate enqueued an operation")
}

func TestEstimateRefusesWhatCannotRun(t *testing.T) {
	comms := shmComms(t, 2, 1<<16, func(cfg *config) { cfg.algo[KindAllReduce] = []Algo{AlgoDirect} })
	_, _, err := comms[0].Estimate(KindAllReduce, 64<<20) // direct takes small messages only
	require.ErrorIs(t, err, ErrNotSupported)
	_, _, err = comms[0].Estimate(Kind(200), 8)
	require.True(t, errors.Is(err, ErrInvalidArgument), err)
	_, _, err = comms[0].Estimate(KindAllReduce, -1)
	require.ErrorIs(t, err, ErrInvalidArgument)
}
