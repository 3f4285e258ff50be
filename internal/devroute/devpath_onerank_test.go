package devroute

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/internal/route"
)

// TestOneRankTakesNoDevicePath: under auto a communicator of one rank has nothing to
// share, so its first device operation neither allocates nor exports scratch, nor
// starts a watcher: its collectives are a copy. Before, it set up the device path
// (1 cuMemAlloc, 1 cuIpcGetMemHandle) for a communicator of one.
func TestOneRankTakesNoDevicePath(t *testing.T) {
	path, _, c, v := oneRankViews(t, devAuto)
	before, err := cudatest.StrictCountersAt(path)
	require.NoError(t, err)
	sh, _, err := v.devicePath(c)
	require.NoError(t, err)
	require.Nil(t, sh, "a communicator of one rank took the device path")
	after, err := cudatest.StrictCountersAt(path)
	require.NoError(t, err)
	delta := after.Sub(before)
	require.Zero(t, delta.DevAllocs, "device scratch allocated")
	require.Zero(t, delta.IpcExports, "device scratch exported")
}

// TestOneRankCollectiveIsADeviceCopy: asked for by name (GONCCL_DEVICE_PATH=samegpu
// or model), a one-rank all_reduce on device buffers is one device-to-device copy on
// the stream: the result is there once the stream has run, and nothing went through
// host memory.
func TestOneRankCollectiveIsADeviceCopy(t *testing.T) {
	for _, mode := range []devMode{devSameGPU, devModel} {
		oneRankCopy(t, mode)
	}
}

func oneRankCopy(t *testing.T, mode devMode) {
	_, f, c, v := oneRankViews(t, mode)
	defer func() { _ = v.e.closePool() }()
	s := v.stream
	const n = 1000
	src, dst := f.Malloc(0, 4*n), f.Malloc(0, 4*n)
	vals := make([]float32, n)
	for i := range vals {
		vals[i] = float32(i) + 0.5
	}
	f.SetFloats(src, vals)
	before := f.Counters()
	op := core.Avg
	sb := buf{"sendbuff", devPtr(src), n, true, false}
	rb := buf{"recvbuff", devPtr(dst), n, false, true}
	req, ok, err := v.tryDevice(c, core.KindAllReduce, core.Float32, &op, noRoot, n, func(*cuda.Shared, *kernels.Kernels, []uintptr) error {
		return errors.New("the device path's all_reduce ran for one rank")
	}, sb, rb)
	require.NoError(t, err)
	require.True(t, ok, "a one-rank all_reduce on device buffers was left to the staged path")
	_, err = req.Wait(-1)
	require.NoError(t, err)
	f.Drain(uintptr(s))
	require.Equal(t, vals, f.Floats(dst, n))
	after := f.Counters()
	require.Zero(t, after.DtoH-before.DtoH, "copies to host memory")
	require.Zero(t, after.HtoD-before.HtoD, "copies from host memory")
}

// devPtr is the fake's device address p as the pointer the C ABI passes.
func devPtr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// oneRankViews builds the fake driver and returns its path, its hooks, a communicator of
// one rank (destroyed when the test ends) and the views of an operation of it in mode
// on a stream of device 0.
func oneRankViews(t *testing.T, mode devMode) (string, *cudatest.Fake, *core.Comm, *Views) {
	path, err := cudatest.BuildIn(t.TempDir())
	require.NoError(t, err)
	d, err := driver.Open(path)
	require.NoError(t, err)
	f, err := cudatest.Open(path)
	require.NoError(t, err)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	c, err := core.NewComm(id, 1, 0, core.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Destroy() })
	s := driver.Stream(f.Stream(0))
	ctx, err := d.StreamContext(s)
	require.NoError(t, err)
	e := &Comm{comm: c, devState: devState{devMode: mode}}
	return path, f, c, &Views{e: e, stream: s, drv: d, ctx: ctx}
}

// TestOneRankAutoStages: under auto a one-rank collective on device buffers stages,
// unpipelined (the path the GPU check has proven for one rank): tryDevice leaves it to
// the staged path, and the copy is not taken. Before, auto took the copy, which no GPU
// has run.
func TestOneRankAutoStages(t *testing.T) {
	require.False(t, route.IsProven(route.OneRank, route.RouteSameGPU), "the table proves the copy now: this test's premise is gone")
	_, f, c, v := oneRankViews(t, devAuto)
	defer func() { _ = v.e.closePool() }()
	src, dst := f.Malloc(0, 64), f.Malloc(0, 64)
	op := core.Sum
	_, ok, err := v.tryDevice(c, core.KindAllReduce, core.Float32, &op, noRoot, 16, func(*cuda.Shared, *kernels.Kernels, []uintptr) error {
		return errors.New("the device path's all_reduce ran for one rank")
	}, buf{"sendbuff", devPtr(src), 16, true, false}, buf{"recvbuff", devPtr(dst), 16, false, true})
	require.NoError(t, err)
	require.False(t, ok, "auto took an unproven path for one rank")
	v.e.devMu.Lock()
	defer v.e.devMu.Unlock()
	require.True(t, v.e.devSetupKnown)
	require.Equal(t, route.OneRank, v.e.devSetup)
	require.False(t, v.e.pipelined())
}
