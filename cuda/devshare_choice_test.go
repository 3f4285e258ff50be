package cuda_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// TestStageWhenDeviceSharedRefusesTogether: with StageWhenDeviceShared (the C ABI's
// default), ranks on devices 0, 1, 0 all get ErrDeviceShared naming ranks 0 and 2 and
// the GPU's bus id, from the one exchange, before any rank maps a peer's scratch;
// without it the same layout would be set up (TestRanksShareADevice).
func TestStageWhenDeviceSharedRefusesTogether(t *testing.T) {
	d, f := open(t)
	devs := []int{0, 1, 0}
	ex := &memExchange{recs: make([][]byte, len(devs)), done: make(chan struct{})}
	errs := setUpShared(d, f, devs, ex.rank, stageWhenShared, nil)
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.True(t, errors.Is(err, cuda.ErrDeviceShared) && errors.Is(err, cuda.ErrNotShared), "rank %d: %v", r, err)
		require.ErrorContains(t, err, "ranks 0 and 2 are both on GPU 0000:10:00.0", "rank %d", r)
	}
}

// TestBusIDNamesTheDevice: the fake's devices have distinct, normalised bus ids.
func TestBusIDNamesTheDevice(t *testing.T) {
	d, _ := open(t)
	a, err := d.BusID(0)
	require.NoError(t, err)
	b, err := d.BusID(1)
	require.NoError(t, err)
	require.Equal(t, "0000:10:00.0", a)
	require.Equal(t, "0000:11:00.0", b)
	_, err = d.BusID(99)
	require.ErrorContains(t, err, "cuDeviceGetPCIBusId")
}

// setUpShared runs NewShared for goroutine ranks on devices devs, the records
// exchanged through exchange(r), with opts(r); look (if not nil) sees each rank's
// Shared, nil where refused, before it is abandoned. It returns each rank's error.
func setUpShared(d *driver.Driver, f *cudatest.Fake, devs []int, exchange func(r int) func([]byte) ([]byte, error),
	opts func(r int) []cuda.SharedOption, look func(r int, sh *cuda.Shared)) []error {
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for r, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, err := d.StreamContext(driver.Stream(f.Stream(dev)))
			if err != nil {
				errs[r] = err
				return
			}
			sh, err := cuda.NewShared(d, ctx, r, len(devs), 1<<20, exchange(r), opts(r)...)
			if look != nil {
				look(r, sh)
			}
			if sh != nil {
				sh.Abandon()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	return errs
}

// stageWhenShared is the options of a rank asked to stage when ranks share a device.
func stageWhenShared(int) []cuda.SharedOption {
	return []cuda.SharedOption{cuda.StageWhenDeviceShared()}
}

// TestSharedRefusedWithoutShareableMemory: where the device cannot make memory that
// outlives its maker (no virtual memory management, or no POSIX file descriptor
// handles), the device path is refused at setup, every rank together, naming the
// device attribute, and no scratch is allocated.
func TestSharedRefusedWithoutShareableMemory(t *testing.T) {
	for _, c := range []struct{ env, attr string }{
		{"FAKECUDA_NO_VMM", "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0"},
		{"FAKECUDA_NO_POSIX_FD", "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 0"},
	} {
		t.Run(c.env, func(t *testing.T) {
			d, f := open(t)
			t.Setenv(c.env, "1")
			devs := []int{0, 1}
			ex := &memExchange{recs: make([][]byte, len(devs)), done: make(chan struct{})}
			before, err := cudatest.StrictCountersAt(cudatest.Path(t))
			require.NoError(t, err)
			errs := setUpShared(d, f, devs, ex.rank, func(int) []cuda.SharedOption { return nil }, nil)
			for r, err := range errs {
				require.ErrorIs(t, err, cuda.ErrNotShared, "rank %d", r)
				require.ErrorContains(t, err, c.attr, "rank %d", r)
			}
			after, err := cudatest.StrictCountersAt(cudatest.Path(t))
			require.NoError(t, err)
			require.Zero(t, after.Sub(before).DevAllocs, "device scratch allocated")
		})
	}
}
