package driver_test

import (
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
)

// TestDevicePointerCreatesNoContext: DevicePointer on a thread with no context current
// (goncclWinRegister from a C caller's thread) asks in the primary context of a device
// the process already uses, not in device 0's: retaining device 0's where the process
// never used it creates a context there (GPU memory on a GPU that is not the rank's),
// and releasing it again resets it. Here the process uses device 1 only; before, the
// query reset device 0's context (counted in primary_resets). It runs in a process of
// its own, so no other test has made device 0's context active.
func TestDevicePointerCreatesNoContext(t *testing.T) {
	if os.Getenv("GONCCL_DEVPTR_CHILD") == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDevicePointerCreatesNoContext$", "-test.count=1")
		cmd.Env = append(os.Environ(), "GONCCL_DEVPTR_CHILD=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "PASS")
		return
	}
	d, f := cudatest.Load(t)
	p := f.Malloc(1, 4096) // the process uses device 1 (its runtime's context)
	before := f.Counters()
	type answer struct {
		dev int
		ok  bool
	}
	got := make(chan answer)
	go func() {
		runtime.LockOSThread() // a fresh thread: no context current
		defer runtime.UnlockOSThread()
		f.SetCurrent(0)
		dev, ok := d.DevicePointer(p)
		got <- answer{dev, ok}
	}()
	a := <-got
	require.True(t, a.ok)
	require.Equal(t, 1, a.dev)
	after := f.Counters()
	require.Equal(t, before.PrimaryResets, after.PrimaryResets, "a query made (and reset) a context on device 0, which the process never used")
	require.Zero(t, after.ContextErrors-before.ContextErrors)
}
