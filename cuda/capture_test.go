package cuda_test

import (
	"bytes"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// TestGlobalCaptureOfAnotherThreadSurvivesDeviceOps: while a user thread captures a
// stream in global mode (torch.cuda.graph's default), gonccl's own threads (the
// watcher's event queries, the scratch's allocations, the staging) must neither
// invalidate the capture nor fail: a potentially unsafe call of a thread not in relaxed
// capture mode does both, on a real driver as on the fake.
func TestGlobalCaptureOfAnotherThreadSurvivesDeviceOps(t *testing.T) {
	d, f := open(t)
	captured := f.NonBlockingStream(1)
	started, stop, ended := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(t, f.Capture(captured, true))
		close(started)
		<-stop
		ended <- f.Capture(captured, false)
	}()
	<-started
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	devs := oneContextSafe(f, []int{0, 0})
	var wg sync.WaitGroup
	errs := make([]error, len(devs))
	for r := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = captureRank(d, f, id, r, devs)
		}()
	}
	wg.Wait()
	close(stop)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.NoError(t, <-ended, "the user's capture")
}

// captureRank is devRank on every tenth case: the scratch exported, the watcher
// querying events, device collectives of every kind, Close.
func captureRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int) error {
	nranks := len(devs)
	c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer c.Destroy()
	dev := devs[rank]
	s := f.Stream(dev)
	ctx, err := d.StreamContext(driver.Stream(s))
	if err != nil {
		return err
	}
	exchange := hostExchange(c)
	sh, err := cuda.NewShared(d, ctx, rank, nranks, devScratch, exchange)
	if err != nil {
		return err
	}
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	watchErr := make(chan error, 1)
	sh.Watch(cuda.WatchConfig{Timeout: c.Timeout, Err: c.Err, CheckAfter: time.Millisecond,
		Fail: func(err error) { watchErr <- err }})
	for i, dc := range devCases(nranks) {
		if i%10 != 0 {
			continue
		}
		got, want, err := runDevCase(c, sh, red, f, dev, driver.Stream(s), rank, nranks, i, dc)
		if err != nil {
			return fmt.Errorf("case %d %+v: %w", i, dc, err)
		}
		if !bytes.Equal(got, want) {
			return fmt.Errorf("case %d %+v: %s", i, dc, devFirstDiff(got, want))
		}
	}
	select {
	case err := <-watchErr:
		return fmt.Errorf("the watcher gave up: %w", err)
	default:
	}
	return sh.Close(time.Minute)
}
