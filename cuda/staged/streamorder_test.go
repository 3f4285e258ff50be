package staged_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/staged"
)

// TestIssueOrderIsPerStream: two pools (two communicators) staging on one stream, as
// two process groups whose streams came from torch's round-robin pool do: the second
// pool's staging waits until the first one's copies are queued and its hold is
// released, so it reads what the first one's owner queued after it.
func TestIssueOrderIsPerStream(t *testing.T) {
	d, f := cudatest.Load(t)
	f.SetDelay(0, 50)
	s := f.PoolStream(7)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	a := f.Malloc(7, 4)
	p1, p2 := staged.NewPool(d), staged.NewPool(d)
	defer p1.Close(10 * time.Second)
	defer p2.Close(10 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	first, err := p1.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "a", Ptr: a, Bytes: 4, In: true, Out: true}})
	require.NoError(t, err)
	first.Hold()
	second, err := p2.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "a", Ptr: a, Bytes: 4, In: true}})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- second.Before(deadline) }()
	select {
	case err := <-done:
		t.Fatalf("the second communicator's staging ran before the first one was (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, first.Before(deadline))
	floats(first.Host[0])[0] = 5
	require.NoError(t, first.After(nil))
	select {
	case err := <-done:
		t.Fatalf("the second staging ran before the first one's hold was released (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, f.Add(s, a, 1, 1, 20000)) // the first owner's copy-out
	first.Release()
	require.NoError(t, <-done)
	require.Equal(t, float32(6), floats(second.Host[0])[0], "the second staging did not see the first one's result and copy-out")
	require.NoError(t, second.After(nil))

	// Point-to-point takes no turn: a later staging does not wait for it.
	p2p, err := p1.StageUnordered(ctx, driver.Stream(s), []staged.Region{{Name: "a", Ptr: a, Bytes: 4, In: true}})
	require.NoError(t, err)
	next, err := p2.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "a", Ptr: a, Bytes: 4, In: true}})
	require.NoError(t, err)
	require.NoError(t, next.Before(time.Now().Add(time.Second)))
	require.NoError(t, next.After(nil))
	p2p.Cancel()
}

// TestOwnStreams: gonccl's own streams are no one else's until given back, then reused,
// and stay valid after the runtime's reference on the primary context is gone.
func TestOwnStreams(t *testing.T) {
	d, f := cudatest.Load(t)
	require.NoError(t, f.RuntimeInit(3))
	a, err := d.OwnStream(3)
	require.NoError(t, err)
	b, err := d.OwnStream(3)
	require.NoError(t, err)
	require.NotEqual(t, a, b)
	require.NoError(t, f.RuntimeRelease(3))
	require.Zero(t, f.Counters().PrimaryResets, "gonccl's reference must keep the context of its streams")
	buf := f.Malloc(3, 4)
	require.NoError(t, f.Fill(uintptr(a), buf, 1, 2, 0))
	f.Drain(uintptr(a))
	require.Equal(t, float32(2), f.Floats(buf, 1)[0])
	require.NoError(t, d.ReturnStream(a))
	require.ErrorContains(t, d.ReturnStream(a), "already given back")
	require.ErrorContains(t, d.ReturnStream(driver.Stream(f.PoolStream(3))), "not one gonccl created")
	again, err := d.OwnStream(3)
	require.NoError(t, err)
	require.Equal(t, a, again)
	require.NoError(t, d.ReturnStream(again))
	require.NoError(t, d.ReturnStream(b))
}

// TestPoolOrderIsItsExecutors: within one pool, stagings wait for each other in the
// order their Before runs (the communicator's executor order), not the order they were
// staged: two threads may stage and then enqueue in opposite orders.
func TestPoolOrderIsItsExecutors(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.PoolStream(2)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	a := f.Malloc(2, 4)
	pool := staged.NewPool(d)
	defer pool.Close(10 * time.Second)
	first, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "a", Ptr: a, Bytes: 4, In: true}})
	require.NoError(t, err)
	first.Hold()
	second, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "a", Ptr: a, Bytes: 4, In: true}})
	require.NoError(t, err)
	require.NoError(t, second.Before(time.Now().Add(2*time.Second)), "the second staging ran first and must not wait for the first")
	require.NoError(t, second.After(nil))
	require.NoError(t, first.Before(time.Now().Add(2*time.Second)))
	require.NoError(t, first.After(nil))
	first.Release()
}
