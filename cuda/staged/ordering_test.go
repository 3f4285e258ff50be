package staged_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/staged"
)

// TestFakeLegacyStreamSemantics pins down the fake's model of the default streams, on
// which the ordering tests rely: the legacy default stream waits for blocking streams
// but not for non-blocking ones (torch's), so a consumer there that is not ordered
// after a non-blocking stream's late work reads stale data.
func TestFakeLegacyStreamSemantics(t *testing.T) {
	_, f := cudatest.Load(t)
	buf := f.Malloc(2, 4)
	for _, tc := range []struct {
		name  string
		s     uintptr
		stale bool
	}{
		{"blocking", f.Stream(2), false},
		{"non-blocking", f.NonBlockingStream(2), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.stale {
				skipAtOneQueue(t, f, "the legacy stream run ahead of a non-blocking stream's queued work")
			}
			// The default stream resolves against this thread's current context.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			f.SetCurrent(f.Context(2))
			defer f.SetCurrent(0)
			f.SetFloats(buf, []float32{0})
			before := f.Counters().StaleReads
			require.NoError(t, f.Fill(tc.s, buf, 1, 7, 200000)) // 200 ms: long enough to lose any race
			require.NoError(t, f.Check(cudatestLegacy, buf, 1, 7, 0))
			f.Drain(cudatestLegacy)
			f.Drain(tc.s)
			require.Equal(t, tc.stale, f.Counters().StaleReads > before)
		})
	}
}

const cudatestLegacy = uintptr(driver.StreamLegacy)

// TestPoolRetainsThePrimaryContext: pinned memory is freed in a context the pool holds
// a reference on, so the runtime releasing its own at exit cannot pull it away.
func TestPoolRetainsThePrimaryContext(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.Stream(4)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	buf := f.Malloc(4, 64)
	before := f.Counters().PrimaryRetained
	pool := staged.NewPool(d)
	st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "buf", Ptr: buf, Bytes: 64, In: true, Out: true}})
	require.NoError(t, err)
	require.Equal(t, before+1, f.Counters().PrimaryRetained)
	require.NoError(t, st.Before(time.Now().Add(10*time.Second)))
	require.NoError(t, st.After(nil))
	require.NoError(t, pool.Close(10*time.Second))
	require.Equal(t, before, f.Counters().PrimaryRetained)
}

// TestHoldKeepsTheNextStagingBack: after Hold, the next staging's Before queues
// nothing until Release, so work the owner queues in between comes first.
func TestHoldKeepsTheNextStagingBack(t *testing.T) {
	d, f := cudatest.Load(t)
	f.SetDelay(0, 50)
	s := f.Stream(5)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	a, b := f.Malloc(5, 4), f.Malloc(5, 4)
	pool := staged.NewPool(d)
	defer pool.Close(10 * time.Second)
	first, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "a", Ptr: a, Bytes: 4, In: true, Out: true}})
	require.NoError(t, err)
	second, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "b", Ptr: b, Bytes: 4, In: true}})
	require.NoError(t, err)
	first.Hold()
	require.NoError(t, first.Before(time.Now().Add(10*time.Second)))
	require.NoError(t, first.After(nil))
	done := make(chan error, 1)
	go func() { done <- second.Before(time.Now().Add(10 * time.Second)) }()
	time.Sleep(30 * time.Millisecond)
	require.NoError(t, f.Fill(s, b, 1, 9, 20000)) // the owner's follow-up work
	first.Release()
	require.NoError(t, <-done)
	require.Equal(t, float32(9), floats(second.Host[0])[0], "the next staging read its input before the follow-up work")
	require.NoError(t, second.After(nil))

	// A hold that is never released fails the next Before at its deadline.
	third, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "b", Ptr: b, Bytes: 4, In: true}})
	require.NoError(t, err)
	third.Hold()
	require.NoError(t, third.Before(time.Now().Add(10*time.Second)))
	require.NoError(t, third.After(nil))
	fourth, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "b", Ptr: b, Bytes: 4, In: true}})
	require.NoError(t, err)
	require.ErrorContains(t, fourth.Before(time.Now().Add(50*time.Millisecond)), "was not released in time")
	require.NoError(t, fourth.After(nil))
}

func TestStreamCapturing(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.NonBlockingStream(6)
	on, err := d.StreamCapturing(driver.Stream(s))
	require.NoError(t, err)
	require.False(t, on)
	require.NoError(t, f.Capture(s, true))
	on, err = d.StreamCapturing(driver.Stream(s))
	require.NoError(t, err)
	require.True(t, on)
	require.NoError(t, f.Capture(s, false))
}
