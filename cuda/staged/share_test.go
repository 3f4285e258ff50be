package staged_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/staged"
)

// TestRanksShareADevice runs three ranks in one process on one fake device (one
// context), each with its own stream and pool, staging all_reduces through core's
// hooks as capi does: results are right, and no copy races on pinned memory, touches
// freed memory or runs without the context current.
func TestRanksShareADevice(t *testing.T) {
	d, f := cudatest.Load(t)
	f.SetDelay(0, 200)
	before := f.Counters()
	const nranks, n, rounds = 3, 20000, 8
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, nranks)
	for r := 0; r < nranks; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = shareRank(t, d, f, id, r, nranks, n, rounds)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	c := f.Counters()
	require.Zero(t, c.BadAccess-before.BadAccess)
	require.Zero(t, c.HostRaces-before.HostRaces)
	require.Zero(t, c.ContextErrors-before.ContextErrors)
	require.Equal(t, before.HostLive, c.HostLive, "every pool was freed")
}

func shareRank(t *testing.T, d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank, nranks, n, rounds int) error {
	c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: 30 * time.Second})
	if err != nil {
		return err
	}
	s := f.Stream(0)
	ctx, err := d.StreamContext(driver.Stream(s))
	if err != nil {
		return err
	}
	pool := staged.NewPool(d)
	buf := f.Malloc(0, 4*n)
	for i := 0; i < rounds; i++ {
		if err := f.Fill(s, buf, n, float32(rank+i), 2000); err != nil {
			return err
		}
		st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "buf", Ptr: buf, Bytes: 4 * n, In: true, Out: true}})
		if err != nil {
			return err
		}
		req, err := c.AllReduce(st.Host[0], st.Host[0], n, core.Float32, core.Sum, core.WithHooks(core.Hooks{Before: st.Before, After: st.After}))
		if err != nil {
			st.Cancel()
			return err
		}
		if _, err := req.Wait(-1); err != nil {
			return err
		}
	}
	f.Drain(s)
	want := float32(nranks*(nranks-1)/2 + nranks*(rounds-1))
	for j, v := range f.Floats(buf, n) {
		if v != want {
			t.Errorf("rank %d: element %d = %v, want %v", rank, j, v, want)
			break
		}
	}
	if err := c.Destroy(); err != nil {
		return err
	}
	return pool.Close(10 * time.Second)
}
