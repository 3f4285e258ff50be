package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// At one hardware queue per context (CUDA_DEVICE_MAX_CONNECTIONS=1, as Megatron-style
// training sets it) a memory wait at the head of the queue holds back every stream of
// the rank's context, the fake's as the driver's (tests/fakecuda/hwqueue.c): the
// device path must still run, and a rank must still release its own stuck streams,
// which a release queued on a stream of its own could not (it would sit behind the
// wait). The ranks are child processes, which inherit the variable.

func TestDevicePathOneHardwareQueue(t *testing.T) {
	open(t)
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
	out, err := runDevRanks(t, "0,0,1", "", "0,200")
	require.NoError(t, err, "%s", out)
}

func TestDeviceP2POneHardwareQueue(t *testing.T) {
	open(t)
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "p2p")
	out, err := runDevRanks(t, "0,0,1", "", "0,200")
	require.NoError(t, err, "%s", out)
}

func TestDevicePathStalledPeerOneHardwareQueue(t *testing.T) {
	open(t)
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
	outs, _ := runFaultRanks(t, "0,0", "stall")
	line := errLine(outs[0])
	require.Contains(t, line, "beyond the communicator's timeout", "%s", outs[0])
	require.Contains(t, line, "rank 1 has not reached it", "%s", outs[0])
	require.Contains(t, outs[0], "STREAM DRAINED", "%s", outs[0])
}

// TestRanksOfOneContextOneHardwareQueue: two ranks of one process on one device have
// one context, so at one hardware queue a stream of one waiting on the GPU for the
// other holds back the other's work it waits for: before the refusal, their first
// collective hung until the communicator's timeout. Now every rank refuses the device
// path (ErrNotShared, which sends callers to the staged path), saying why. The ranks
// are goroutines of one child process, which inherits the variable.
func TestRanksOfOneContextOneHardwareQueue(t *testing.T) {
	open(t)
	t.Setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "one-context")
	out, err := runDevRanks(t, "0", "", "0,200")
	require.NoError(t, err, "%s", out)
	require.Contains(t, out, "rank 0: staged: ", "%s", out)
	require.Contains(t, out, "rank 1: staged: ", "%s", out)
	require.Contains(t, out, "ranks 0 and 1 share one context, whose streams share 1 hardware queue", "%s", out)
}

// oneContextRanks runs two ranks on device 0 as goroutines of this process: each sets
// up the device path and, if it is granted, runs the first cases of devRank's script
// with a short timeout (which the hang this guards against would exceed); it prints
// each rank's answer.
func oneContextRanks(d *driver.Driver, f *cudatest.Fake, _ core.UniqueID, _ int, _ []int, log *os.File) error {
	id, err := core.NewUniqueID()
	if err != nil {
		return err
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = oneContextRank(d, f, id, r, log)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func oneContextRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, log *os.File) error {
	c, err := core.NewComm(id, 2, rank, core.Options{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer c.Destroy()
	s := driver.Stream(f.Stream(0))
	ctx, err := d.StreamContext(s)
	if err != nil {
		return err
	}
	sh, err := cuda.NewShared(d, ctx, rank, 2, devScratch, hostExchange(c))
	if errors.Is(err, cuda.ErrNotShared) {
		fmt.Fprintf(log, "rank %d: staged: %v\n", rank, err)
		return nil
	}
	if err != nil {
		return err
	}
	sh.Watch(cuda.WatchConfig{Timeout: c.Timeout, Err: c.Err, Fail: c.FailDevice})
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	n := 1000
	src, dst := f.Malloc(0, 4*n), f.Malloc(0, 4*n)
	if err := sh.AllReduce(s, red, src, dst, n, core.Float32, core.Sum); err != nil {
		return err
	}
	f.Drain(uintptr(s))
	if err := sh.Err(); err != nil {
		return fmt.Errorf("rank %d: the device path's all_reduce failed: %w", rank, err)
	}
	return sh.Close(5 * time.Second)
}

// oneContextSafe returns devs as tests of ranks that are goroutines of this process
// may use them: unchanged, unless the contexts' streams share one hardware queue
// (this process runs the package at CUDA_DEVICE_MAX_CONNECTIONS=1), where ranks on one
// device would share one context and the device path refuses them
// (TestRanksOfOneContextOneHardwareQueue): then each rank gets a device of its own.
func oneContextSafe(f *cudatest.Fake, devs []int) []int {
	if f.HardwareQueues() > 1 {
		return devs
	}
	out := make([]int, len(devs))
	for r := range out {
		out[r] = r
	}
	return out
}
