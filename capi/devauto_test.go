package main

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// autoRanks sets up auto's paths for a communicator of two ranks of this process on
// the fake's devices 0 and 1, with GONCCL_DEVICE_PATH_COST=cost, each rank deciding on
// its own goroutine; returns each rank's entry (closed when the test ends).
func autoRanks(t *testing.T, cost string) []*commEntry {
	path, err := cudatest.BuildIn(t.TempDir())
	require.NoError(t, err)
	d, err := driver.Open(path)
	require.NoError(t, err)
	f, err := cudatest.Open(path)
	require.NoError(t, err)
	costs, err := parseGPUCosts(cost)
	require.NoError(t, err)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	const n = 2
	entries := make([]*commEntry, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := core.NewComm(id, n, r, core.Options{Timeout: 20 * time.Second})
			if err != nil {
				errs[r] = err
				return
			}
			s := driver.Stream(f.Stream(r))
			ctx, err := d.StreamContext(s)
			if err != nil {
				errs[r] = err
				return
			}
			e := &commEntry{comm: c, devState: devState{devMode: devAuto, devCosts: costs}}
			entries[r] = e
			v := &views{e: e, stream: s, drv: d, ctx: ctx, dev: r}
			_, _, errs[r] = v.devicePath(c)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, e := range entries {
			if e == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.closeDevice(false)
				_ = e.comm.Destroy()
			}()
		}
		wg.Wait()
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return entries
}

// TestAutoSetsUpWhatTheModelChooses: on GPUs of their own that map each other, auto
// sets up the device path and both ranks choose alike, by size (here staged below a
// crossover the figures put at tens of KiB, the device path above).
func TestAutoSetsUpWhatTheModelChooses(t *testing.T) {
	es := autoRanks(t, "staged.latency=1")
	for r, e := range es {
		require.NotNil(t, e.devShared, "rank %d: no device path", r)
		require.Nil(t, e.devSame, "rank %d: the same-GPU path on two GPUs", r)
		require.True(t, e.devChoice.avail[pathDevice])
		require.Equal(t, pathStaged, e.devChoice.path(core.KindAllReduce, 1024))
		require.Equal(t, pathDevice, e.devChoice.path(core.KindAllReduce, 4<<20))
		require.Equal(t, es[0].devChoice.describe(), e.devChoice.describe(), "rank %d", r)
	}
}

// TestAutoNeverChoosesARefusedPath: where the GPUs cannot map each other
// (FAKECUDA_NO_PEER), the device path's setup is refused on every rank, and no
// operation of any size is sent to it, though the figures make it the cheapest by far.
func TestAutoNeverChoosesARefusedPath(t *testing.T) {
	t.Setenv("FAKECUDA_NO_PEER", "1")
	es := autoRanks(t, "device.latency=0,device.busbw=100000,staged.latency=100000")
	for r, e := range es {
		require.Nil(t, e.devShared, "rank %d: a device path over GPUs that cannot map each other", r)
		pc := e.devChoice
		require.NotNil(t, pc, "rank %d", r)
		require.False(t, pc.avail[pathDevice] || pc.avail[pathSameGPU], "rank %d: %v", r, pc.avail)
		require.False(t, pc.uses(pathDevice), "rank %d", r)
		for _, k := range chosenKinds {
			for _, b := range modelSizes() {
				require.Equal(t, pathStaged, pc.path(k, b), "rank %d: %s of %d bytes", r, k, b)
			}
		}
	}
}
