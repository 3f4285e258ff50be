package core

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// die makes c's process look dead to its peers: every connection ends at once and no
// goodbye is sent (what the kernel does for a SIGKILLed process).
func die(c *Comm) {
	c.p2p.mu.Lock()
	for _, pp := range c.p2p.peers {
		if pp != nil {
			pp.conn.Close()
		}
	}
	c.p2p.mu.Unlock()
	c.closeLinks()
}

// A rank that dies breaks the communicator on every survivor, whichever peers each
// one's next collective waits on: every survivor's operation fails naming the dead
// rank as its cause (not the neighbour whose own failure reached it first), long
// before the timeout, and so does every later one.
func TestLostRankBreaksEverySurvivor(t *testing.T) {
	for _, tc := range []struct {
		shm      string
		inFlight bool // the rank dies while the survivors' collective runs, or before
	}{{"0", false}, {"1", false}, {"0", true}, {"1", true}} {
		t.Run(fmt.Sprintf("shm_disable=%s,in_flight=%v", tc.shm, tc.inFlight), func(t *testing.T) {
			t.Setenv("GONCCL_SHM_DISABLE", tc.shm)
			const n, dead = 5, 2
			comms := initAllTimeout(t, n, 60*time.Second)
			if tc.inFlight {
				time.AfterFunc(200*time.Millisecond, func() { die(comms[dead]) })
			} else {
				die(comms[dead])
				time.Sleep(300 * time.Millisecond) // every survivor has read the end of its connection
			}
			var live []*Comm
			for r, c := range comms {
				if r != dead {
					live = append(live, c)
				}
			}
			count := 100003
			bufs := make([][]byte, n)
			for r := range bufs {
				bufs[r] = make([]byte, 4*count)
			}
			start := time.Now()
			for i, err := range onAll(t, live, func(c *Comm) (*Request, error) {
				return c.AllReduce(bufs[c.rank], bufs[c.rank], count, Float32, Sum)
			}) {
				var oe *OpError
				require.True(t, errors.As(err, &oe), "rank %d: %v", live[i].rank, err)
				require.Contains(t, oe.Err.Error(), "lost rank 2", "rank %d blames another rank", live[i].rank)
			}
			require.Less(t, time.Since(start), 10*time.Second)
			for _, c := range live {
				_, err := c.Barrier()
				if err == nil {
					continue // enqueued; it fails when it runs
				}
				require.ErrorContains(t, err, "lost rank 2")
			}
			for _, c := range comms {
				require.NoError(t, c.Abort())
			}
		})
	}
}
