package cuda_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/topology"
)

// TestShareUnderMPS: ranks 0 and 1 on one fake GPU (and rank 2 on another) with
// StageWhenDeviceShared and ShareUnderMPS. When both ranks on the shared GPU report
// that they are MPS clients, every rank takes the device path and says why; when one
// does not, every rank refuses together, naming it. Rank 2 (alone on its GPU) is never
// asked whether it is a client.
func TestShareUnderMPS(t *testing.T) {
	// The MPS decision, not the hardware-queue rule: these ranks are goroutines of one
	// process on one device, so they share a context, which at one queue the device path
	// refuses (TestRanksOfOneContextOneHardwareQueue); nothing runs on their streams here.
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8")
	d, f := open(t)
	devs := []int{0, 0, 1}
	for _, c := range []struct {
		name    string
		clients []bool
	}{{"all clients", []bool{true, true, false}}, {"rank 1 not a client", []bool{true, false, true}}} {
		t.Run(c.name, func(t *testing.T) {
			ex := newRoundsExchange(len(devs))
			lines := make([]string, len(devs))
			asked := make([]string, len(devs))
			details := make([]string, len(devs))
			opts := func(r int) []cuda.SharedOption {
				detect := func(bus string) topology.MPSStatus {
					asked[r] = bus
					return topology.MPSStatus{Client: c.clients[r], Why: fmt.Sprintf("rank %d's stand-in", r)}
				}
				return []cuda.SharedOption{cuda.StageWhenDeviceShared(), cuda.ShareUnderMPS(detect)}
			}
			errs := setUpShared(d, f, devs, ex.rank, opts, func(r int, sh *cuda.Shared) {
				if sh != nil {
					lines[r], details[r] = sh.MPS(), sh.MPSDetail()
				}
			})
			require.Equal(t, []string{"0000:10:00.0", "0000:10:00.0", ""}, asked,
				"asked once a GPU is shared, by the ranks that share it (every rank takes part in the second round)")
			for r, err := range errs {
				if c.clients[1] {
					require.NoError(t, err, "rank %d", r)
					require.Equal(t, []string{"rank 0's stand-in", "rank 1's stand-in", ""}, details)
					require.Equal(t, "MPS active on GPU 0000:10:00.0 (all 2 ranks on it are clients): GPU-side waits allowed", lines[r], "rank %d", r)
					continue
				}
				require.True(t, errors.Is(err, cuda.ErrDeviceShared), "rank %d: %v", r, err)
				require.ErrorContains(t, err, "ranks 0 and 1 are both on GPU 0000:10:00.0, and rank 1 is not a client of an MPS server there", "rank %d", r)
			}
		})
	}
}

// roundsExchange is an in-memory all-gather for goroutine ranks, any number of rounds.
type roundsExchange struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n       int
	next    []int            // each rank's next round
	recs    map[int][][]byte // per round, every rank's record
	arrived map[int]int
}

func newRoundsExchange(n int) *roundsExchange {
	m := &roundsExchange{n: n, next: make([]int, n), recs: map[int][][]byte{}, arrived: map[int]int{}}
	m.cond = sync.NewCond(&m.mu)
	return m
}

func (m *roundsExchange) rank(r int) func([]byte) ([]byte, error) {
	return func(rec []byte) ([]byte, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		k := m.next[r]
		m.next[r]++
		if m.recs[k] == nil {
			m.recs[k] = make([][]byte, m.n)
		}
		m.recs[k][r] = rec
		m.arrived[k]++
		m.cond.Broadcast()
		for m.arrived[k] < m.n {
			m.cond.Wait()
		}
		return bytes.Join(m.recs[k], nil), nil
	}
}
