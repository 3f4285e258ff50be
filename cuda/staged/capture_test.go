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

// TestGlobalCaptureSurvivesStaging: while a user thread captures a stream in global
// mode (torch.cuda.graph's default), the staged path's potentially unsafe calls on
// another stream (the pinned allocation, the event queries of its waits, the free at
// close) neither fail nor invalidate the capture: the driver makes them in relaxed
// capture mode (driver.Driver.relaxed). This is why the default path's calls include a
// cuThreadExchangeStreamCaptureMode pair around each of them (docs/gpu.md). Without the
// pair: "cuda: cuMemHostAlloc: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED".
func TestGlobalCaptureSurvivesStaging(t *testing.T) {
	d, f := cudatest.Load(t)
	captured := f.NonBlockingStream(1)
	started, stop, ended := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := f.Capture(captured, true); err != nil {
			ended <- err
			close(started)
			return
		}
		close(started)
		<-stop
		ended <- f.Capture(captured, false)
	}()
	<-started
	s := f.Stream(0)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	buf := f.Malloc(0, 4096)
	pool := staged.NewPool(d)
	for range 3 {
		st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "x", Ptr: buf, Bytes: 4096, In: true, Out: true}})
		require.NoError(t, err)
		require.NoError(t, st.Before(time.Now().Add(10*time.Second)))
		require.NoError(t, st.After(nil))
	}
	require.NoError(t, pool.Close(10*time.Second))
	close(stop)
	require.NoError(t, <-ended, "the user's capture")
}
