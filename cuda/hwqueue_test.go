package cuda_test

import (
	"testing"

	"github.com/stretchr/testify/require"
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
