package devroute

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/route"
)

// defaultPathCalls are the driver entry points the default path (auto, while the table
// proves nothing but staging) calls for one collective on device buffers, the
// communicator's first, and how many times at most per rank: what e18d63d's staged path
// called on the H100, counted by the same fake (tests/capi/cuda_calls_test.c run there),
// less the context switches of each event query. Not counted here: the event queries of
// the host's waits (defaultPathQueries), and the capture-mode exchanges around the
// potentially unsafe calls (two per wait, allocation and free, at most two per query:
// see driver.Driver.relaxed). docs/gpu.md lists them. Nothing a path auto cannot choose
// needs is called: no module, no NVML, no IPC, no device memory, no bus id.
var defaultPathCalls = map[string]int{
	// the stream, its context and device, on the calling thread (NewViews)
	"cuStreamGetCtx": 1, "cuStreamIsCapturing": 1, "cuCtxGetDevice": 2,
	// making the stream's context current on gonccl's threads, and back (e18d63d: 9,
	// and one more per event query)
	"cuCtxGetCurrent": 12, "cuCtxSetCurrent": 24,
	// each end of each buffer (send and receive): device memory of the stream's device
	"cuPointerGetAttribute": 4,
	// the pinned pool: a reference on the primary context, the staging memory
	"cuDevicePrimaryCtxRetain": 1, "cuMemHostAlloc": 1,
	// the copies and the event that tracks them
	"cuMemcpyDtoHAsync_v2": 1, "cuMemcpyHtoDAsync_v2": 1,
	"cuEventCreate": 1, "cuEventRecord": 2, "cuEventDestroy_v2": 1,
}

// defaultPathQueries bounds the event queries of one rank's operation: its waits sleep
// from 10 us doubling to 1 ms between queries, as e18d63d's did, so a wait of t costs
// about log2(1 ms / 10 us) + t / 1 ms of them. Spinning on the query for 100 us
// (99abc64) cost up to a hundred more per wait.
func defaultPathQueries(wait time.Duration) int { return 2 * (8 + int(wait/time.Millisecond)) }

// TestAutoDefaultPathDriverCalls: under auto (the default), a 256 MiB all_reduce of
// two ranks on device buffers, on one GPU (the setup the staged path is proven on) and
// on a GPU each, makes only the driver calls of defaultPathCalls: no kernel module
// (the multi-rank kernels have never run on a GPU), no NVML, no all-gathers of the
// ranks' GPUs, no calls of the device paths auto cannot choose. Before, the first
// operation loaded the kernel module (cuModuleLoadData, cuModuleGetFunction and
// cuFuncLoad per kernel) and read each GPU's bus id.
func TestAutoDefaultPathDriverCalls(t *testing.T) {
	require.True(t, route.StagedOnly(), "the table proves a path other than staging now: this test's premise is gone")
	path, err := cudatest.BuildIn(t.TempDir())
	require.NoError(t, err)
	d, err := driver.Open(path)
	require.NoError(t, err)
	f, err := cudatest.Open(path)
	require.NoError(t, err)
	f.SetDelay(0, 0)
	defer f.SetDelay(0, 200)
	count := 64 << 20 // float32: 256 MiB
	if testing.Short() {
		count = 1 << 20 // 4 MiB: the same calls (test-race runs -short, where 256 MiB takes minutes)
	}
	for _, devs := range [][2]int{{0, 0}, {0, 1}} {
		t.Run(fmt.Sprintf("devices-%d-%d", devs[0], devs[1]), func(t *testing.T) {
			calls, waited := defaultPathAllReduce(t, path, d, f, devs, count)
			var extra []string
			queries, exchanges := calls["cuEventQuery"], calls["cuThreadExchangeStreamCaptureMode"]
			for name, n := range calls {
				if name == "cuEventQuery" || name == "cuThreadExchangeStreamCaptureMode" {
					continue
				}
				if limit, ok := defaultPathCalls[name]; !ok || n > 2*limit {
					extra = append(extra, fmt.Sprintf("%s %d (at most %d)", name, n, 2*limit))
				}
			}
			sort.Strings(extra)
			t.Logf("driver calls of two ranks' %d MiB all_reduce (the host waited %v): %s", count>>18, waited, describeCalls(calls))
			require.Empty(t, extra, "driver calls the default path does not make on hardware (two ranks)")
			require.LessOrEqual(t, queries, 2*defaultPathQueries(waited), "cuEventQuery: the host's waits poll (two ranks)")
			require.LessOrEqual(t, exchanges, 2*(queries+calls["cuMemHostAlloc"]+calls["cuMemFreeHost"]),
				"cuThreadExchangeStreamCaptureMode: more than a pair around each potentially unsafe call")
		})
	}
}

// defaultPathAllReduce runs one all_reduce of count float32 of two ranks of this
// process under auto on the fake's devices devs, its first operation on device
// buffers, and returns the driver calls it made (both ranks), and the longest time a
// rank's operation took.
func defaultPathAllReduce(t *testing.T, path string, d *driver.Driver, f *cudatest.Fake, devs [2]int, count int) (cudatest.Calls, time.Duration) {
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	const n = 2
	comms := make([]*core.Comm, n)
	bufs := make([]uintptr, n)
	streams := make([]driver.Stream, n)
	for r := range n {
		streams[r] = driver.Stream(f.Stream(devs[r]))
		bufs[r] = f.Malloc(devs[r], 4*count)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = core.NewComm(id, n, r, core.Options{Timeout: 60 * time.Second})
		}()
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
	}
	entries := make([]*Comm, n)
	for r := range n {
		entries[r] = &Comm{comm: comms[r], devState: devState{devMode: devAuto}}
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, e := range entries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.closeDevice(false)
				_ = e.closePool()
				_ = e.comm.Destroy()
			}()
		}
		wg.Wait()
	})
	before, err := cudatest.CallsAt(path)
	require.NoError(t, err)
	took := make([]time.Duration, n)
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			v, err := newViews(entries[r], d, streams[r])
			if err != nil {
				errs[r] = err
				return
			}
			op := core.Sum
			p := devPtr(bufs[r])
			req, err := v.Run(comms[r], Op{Kind: core.KindAllReduce, Type: core.Float32, RedOp: &op, Root: core.NoRoot, Count: count,
				Send: In("sendbuff", p, uint64(count)), Recv: Out("recvbuff", p, uint64(count)), Blocks: [2]int{1, 1},
				Host: func(b [][]byte, k int, o []core.OpOption) (*core.Request, error) {
					return comms[r].AllReduce(b[0], b[1], k, core.Float32, op, o...)
				}})
			if err == nil {
				_, err = req.Wait(-1)
			}
			errs[r] = err
			took[r] = time.Since(start)
		}()
	}
	wg.Wait()
	for r := range n {
		require.NoError(t, errs[r], "rank %d", r)
		f.Drain(uintptr(streams[r]))
	}
	after, err := cudatest.CallsAt(path)
	require.NoError(t, err)
	return after.Sub(before), max(took[0], took[1])
}

// describeCalls lists calls by name, for the test's log.
func describeCalls(c cudatest.Calls) string {
	var s []string
	for name, n := range c {
		s = append(s, fmt.Sprintf("%s %d", name, n))
	}
	sort.Strings(s)
	return fmt.Sprintf("%d in all: %s", c.Total(), strings.Join(s, ", "))
}

// optionalEntries are the driver entry points only paths other than the default one
// call (or that it can do without: the capture mode exchange).
var optionalEntries = []string{
	"cuModuleLoadData", "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel",
	"cuMemAlloc_v2", "cuMemFree_v2", "cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2",
	"cuIpcCloseMemHandle", "cuMemcpyDtoDAsync_v2", "cuStreamWaitValue32_v2", "cuStreamWriteValue32_v2",
	"cuDeviceCanAccessPeer", "cuDeviceGetPCIBusId", "cuStreamDestroy_v2", "cuThreadExchangeStreamCaptureMode",
	"cuMemHostRegister_v2", "cuMemHostUnregister", "cuMemHostGetDevicePointer_v2",
	// the device path's scratch, shared as file descriptors (cuda/driver/vmm.go)
	"cuDeviceGetAttribute", "cuMemGetAllocationGranularity", "cuMemCreate", "cuMemExportToShareableHandle",
	"cuMemImportFromShareableHandle", "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap", "cuMemSetAccess",
	"cuMemUnmap", "cuMemRelease",
	// the kernels' module cache tells contexts apart by id (cuda/driver/ctxid.go)
	"cuCtxGetId",
}

// TestAutoDefaultPathOnADriverWithoutTheOthers: a driver that has only the staged
// path's entry points loads, and the default path's all_reduce runs on it; what needs
// another entry point fails naming it. Before, any of the 20 missing failed the load, so
// CUDA was unavailable and device buffers refused ("stream given but CUDA is not
// available: ... undefined symbol: cuModuleLoadData"); six of them (the bus id, the
// stream destroy, the capture mode exchange, host registration) came after e18d63d.
func TestAutoDefaultPathOnADriverWithoutTheOthers(t *testing.T) {
	path, err := cudatest.BuildWithout(t.TempDir(), optionalEntries...)
	require.NoError(t, err)
	d, err := driver.Open(path)
	require.NoError(t, err, "a driver without the other paths' entry points")
	f, err := cudatest.Open(path)
	require.NoError(t, err)
	const count = 1 << 12
	calls, _ := defaultPathAllReduce(t, path, d, f, [2]int{0, 1}, count)
	require.NotZero(t, calls["cuMemcpyDtoHAsync_v2"])
	_, err = d.BusID(0)
	require.ErrorContains(t, err, "cuDeviceGetPCIBusId: not in this CUDA driver")
	require.NoError(t, d.Do(driver.Context(f.Context(0)), func() error {
		_, err := d.MemAlloc(64)
		require.ErrorContains(t, err, "cuMemAlloc: not in this CUDA driver")
		return nil
	}))
	require.ErrorContains(t, d.VMMSupported(0), "the driver has no cuDeviceGetAttribute")
}
