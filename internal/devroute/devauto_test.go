package devroute

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/route"
)

// autoRanks sets up the paths of mode (auto or model) for a communicator of two ranks
// of this process on the fake's devices devs[0] and devs[1], with
// GONCCL_DEVICE_PATH_COST=cost, each rank deciding on its own goroutine; returns each
// rank's entry (closed when the test ends).
func autoRanks(t *testing.T, mode devMode, devs [2]int, cost string) []*Comm {
	return autoRanksFault(t, mode, devs, cost, nil)
}

// autoRanksFault is autoRanks where fault, if not nil, fails rank r's setup of a path
// after the path's own exchange (Comm.devSetupFault).
func autoRanksFault(t *testing.T, mode devMode, devs [2]int, cost string, fault func(r int, p route.Path) error) []*Comm {
	path, err := cudatest.BuildIn(t.TempDir())
	require.NoError(t, err)
	return autoRanksOn(t, path, mode, devs, cost, fault)
}

// autoRanksOn is autoRanksFault on the fake driver at path.
func autoRanksOn(t *testing.T, path string, mode devMode, devs [2]int, cost string, fault func(r int, p route.Path) error) []*Comm {
	d, err := driver.Open(path)
	require.NoError(t, err)
	f, err := cudatest.Open(path)
	require.NoError(t, err)
	costs, err := route.ParseCosts(cost)
	require.NoError(t, err)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	const n = 2
	entries := make([]*Comm, n)
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
			s := driver.Stream(f.Stream(devs[r]))
			ctx, err := d.StreamContext(s)
			if err != nil {
				errs[r] = err
				return
			}
			e := &Comm{comm: c, devState: devState{devMode: mode, devCosts: costs}}
			if fault != nil {
				e.devSetupFault = func(p route.Path) error { return fault(r, p) }
			}
			entries[r] = e
			v := &Views{e: e, stream: s, drv: d, ctx: ctx, dev: devs[r]}
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

// TestModelSetsUpWhatTheModelChooses: on GPUs of their own that map each other,
// GONCCL_DEVICE_PATH=model sets up the device path and both ranks choose alike, by size
// (here staged below a crossover the figures put at tens of KiB, the device path above).
func TestModelSetsUpWhatTheModelChooses(t *testing.T) {
	es := autoRanks(t, devModel, [2]int{0, 1}, "staged.latency=1")
	for r, e := range es {
		require.NotNil(t, e.devShared, "rank %d: no device path", r)
		require.Nil(t, e.devSame, "rank %d: the same-GPU path on two GPUs", r)
		require.True(t, e.devChoice.Has(route.Device))
		require.Equal(t, route.Staged, e.devChoice.Pick(core.KindAllReduce, 1024))
		require.Equal(t, route.Device, e.devChoice.Pick(core.KindAllReduce, 4<<20))
		require.Equal(t, es[0].devChoice.Describe(), e.devChoice.Describe(), "rank %d", r)
	}
}

// TestAutoSetsUpOnlyProvenPaths: auto sets up only what the GPU check has proven,
// however cheap the model makes the rest. While the table proves nothing but
// unpipelined staging on any setup of several ranks, auto does not even find the
// ranks' setup: one rank per GPU and two ranks sharing a GPU stage every operation
// of every size, unpipelined, with no path set up and no agreement step run. Before,
// auto set up the device path on GPUs of their own and the same-GPU path on a shared
// one; then (until route.StagedOnly) it ran the agreement and loaded the kernels first.
func TestAutoSetsUpOnlyProvenPaths(t *testing.T) {
	const cheap = "device.latency=0,device.busbw=100000,samegpu.latency=0,samegpu.busbw=100000,staged.latency=100000"
	require.True(t, route.StagedOnly(), "the table proves a path other than staging now: this test's premise is gone")
	for _, devs := range [][2]int{{0, 1}, {0, 0}} {
		es := autoRanks(t, devAuto, devs, cheap)
		for r, e := range es {
			require.True(t, e.devShared == nil, "rank %d (devices %v): auto set up the device path", r, devs)
			require.True(t, e.devSame == nil, "rank %d (devices %v): auto set up the same-GPU path", r, devs)
			require.True(t, e.devKernels == nil, "rank %d (devices %v): auto loaded the kernels", r, devs)
			require.False(t, e.devSetupKnown, "rank %d (devices %v): auto ran the agreement step", r, devs)
			require.Nil(t, e.devChoice, "rank %d (devices %v)", r, devs)
			require.False(t, e.pipelined(), "rank %d (devices %v): auto pipelines staging", r, devs)
		}
	}
}

// TestAutoNeverChoosesARefusedPath: where the GPUs cannot map each other
// (FAKECUDA_NO_PEER), the device path's setup is refused on every rank, and no
// operation of any size is sent to it, though the figures make it the cheapest by far.
func TestAutoNeverChoosesARefusedPath(t *testing.T) {
	t.Setenv("FAKECUDA_NO_PEER", "1")
	es := autoRanks(t, devModel, [2]int{0, 1}, "device.latency=0,device.busbw=100000,staged.latency=100000")
	for r, e := range es {
		require.Nil(t, e.devShared, "rank %d: a device path over GPUs that cannot map each other", r)
		pc := e.devChoice
		require.NotNil(t, pc, "rank %d", r)
		require.False(t, pc.Has(route.Device) || pc.Has(route.SameGPU), "rank %d", r)
		require.False(t, pc.Uses(route.Device), "rank %d", r)
		for _, k := range route.ChosenKinds {
			for _, b := range []int{0, 1, 1000, 4 << 20, 1 << 30} {
				require.Equal(t, route.Staged, pc.Pick(k, b), "rank %d: %s of %d bytes", r, k, b)
			}
		}
	}
}

// TestSetupIsAllOrNothing: where one rank cannot finish a path's setup after the
// path's own exchange (rank 1 here cannot open the same-GPU path's peer resources),
// every rank leaves that path out and stages, together, and the INIT note names the
// rank and why. Before, rank 1 failed its operation while rank 0 took the same-GPU
// path and waited for it.
func TestSetupIsAllOrNothing(t *testing.T) {
	es := autoRanksFault(t, devModel, [2]int{0, 0}, "", func(r int, p route.Path) error {
		if r == 1 && p == route.SameGPU {
			return errors.New("opening rank 0's event: no such process")
		}
		return nil
	})
	for r, e := range es {
		require.True(t, e.devSame == nil, "rank %d kept the same-GPU path rank 1 could not set up", r)
		require.False(t, e.devChoice.Has(route.SameGPU), "rank %d", r)
		for _, k := range route.ChosenKinds {
			require.NotEqual(t, route.SameGPU, e.devChoice.Pick(k, 64<<20), "rank %d: %s", r, k)
		}
	}
}

// TestDestroyUnloadsTheKernels: a communicator that loaded the reduction kernels (the
// device path under model, on a GPU per rank) unloads them once destroyed, the module of
// each context with its last holder, so a context released afterwards (and one that
// comes back with the same handle) never meets a stale module; the next communicator
// loads them again. Before, the module stayed cached for the process's life: no
// cuModuleUnload ever.
func TestDestroyUnloadsTheKernels(t *testing.T) {
	path, err := cudatest.BuildIn(t.TempDir())
	require.NoError(t, err)
	es := autoRanksOn(t, path, devModel, [2]int{0, 1}, "staged.latency=1", nil)
	for r, e := range es {
		require.NotNil(t, e.devShared, "rank %d: no device path", r)
	}
	before, err := cudatest.CallsAt(path)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, len(es))
	for r, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = errors.Join(e.closeDevice(false), e.closePool())
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	after, err := cudatest.CallsAt(path)
	require.NoError(t, err)
	require.Equal(t, 2, after.Sub(before)["cuModuleUnload"], "one module per context, unloaded at destroy")
}
