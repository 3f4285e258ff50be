package cuda_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
)

// TestDevicePathOrdinalsAreProcessLocal: with a per-rank CUDA_VISIBLE_DEVICES a
// device ordinal names a different GPU in each process (the fake numbers them as the
// driver does), so whether two ranks share a GPU, or must ask whether their GPUs can
// access each other, is decided from the PCI bus ids.
//   - same-gpu: ranks 0 and 1 both run on physical GPU 0, as their devices 0
//     (CUDA_VISIBLE_DEVICES=0,1) and 1 (CUDA_VISIBLE_DEVICES=1,0); the GPUs cannot
//     access each other (FAKECUDA_NO_PEER), which does not matter on one GPU. Before,
//     ordinals 0 and 1 differed, so NewShared asked whether device 0 could access
//     device 1 and refused: "devices 0 (rank 0) and 1 (rank 1) cannot access each
//     other's memory".
//   - one-each: each rank sees only its own GPU, as its device 0: two GPUs, both
//     device 0, set up and checked end to end.
func TestDevicePathOrdinalsAreProcessLocal(t *testing.T) {
	open(t)
	t.Run("same-gpu", func(t *testing.T) {
		out, err := runDevRanksEnv(t, "0,1", "", "0,200", func(r int) []string {
			return []string{"CUDA_VISIBLE_DEVICES=" + []string{"0,1", "1,0"}[r], "FAKECUDA_NO_PEER=1"}
		})
		require.NoError(t, err, "%s", out)
	})
	t.Run("one-each", func(t *testing.T) {
		out, err := runDevRanksEnv(t, "0,0", "", "0,200", func(r int) []string {
			return []string{"CUDA_VISIBLE_DEVICES=" + []string{"0", "1"}[r]}
		})
		require.NoError(t, err, "%s", out)
	})
}

// TestSharedGPUDecidedBeforeAllocating: ranks that share a GPU (devices 0, 1, 0) are
// refused by StageWhenDeviceShared from their bus ids alone: no device scratch is
// allocated or exported, no pinned memory taken. Before, every rank allocated and
// exported its scratch, then refused and freed it (3 cuMemAlloc, 3 cuIpcGetMemHandle).
func TestSharedGPUDecidedBeforeAllocating(t *testing.T) {
	d, f := open(t)
	devs := []int{0, 1, 0}
	ex := &memExchange{recs: make([][]byte, len(devs)), done: make(chan struct{})}
	before, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	hostBefore := f.Counters().HostAllocs
	errs := setUpShared(d, f, devs, ex.rank, stageWhenShared, nil)
	for r, err := range errs {
		require.True(t, errors.Is(err, cuda.ErrDeviceShared), "rank %d: %v", r, err)
	}
	after, err := cudatest.StrictCountersAt(cudatest.Path(t))
	require.NoError(t, err)
	delta := after.Sub(before)
	require.Zero(t, delta.DevAllocs, "device scratch allocated before deciding")
	require.Zero(t, delta.IpcExports, "device scratch exported before deciding")
	require.Zero(t, f.Counters().HostAllocs-hostBefore, "pinned memory allocated before deciding")
}

// TestDevicePathPeerAccessPerPair: peer access is a property of a pair of GPUs (two
// NVLink islands: FAKECUDA_PEER_GROUPS=0,1;2,3), not of the machine: ranks on GPUs 0
// and 1 set up the device path and check it end to end, ranks on GPUs 0 and 2 are
// refused at setup, naming both GPUs. Before, the fake let every pair of GPUs access
// each other, so the refusal was never exercised with other pairs that could.
func TestDevicePathPeerAccessPerPair(t *testing.T) {
	d, _ := open(t)
	t.Setenv("FAKECUDA_PEER_GROUPS", "0,1;2,3")
	for _, c := range []struct {
		a, b int
		can  bool
	}{{0, 1, true}, {2, 3, true}, {0, 2, false}, {1, 3, false}, {3, 0, false}} {
		can, err := d.CanAccessPeer(c.a, c.b)
		require.NoError(t, err)
		require.Equal(t, c.can, can, "GPUs %d and %d", c.a, c.b)
	}
	env := func(int) []string { return []string{"FAKECUDA_PEER_GROUPS=0,1;2,3"} }
	out, err := runDevRanksEnv(t, "0,1", "", "0,200", env)
	require.NoError(t, err, "%s", out)
	out, err = runDevRanksEnv(t, "0,2", "", "0,200", env)
	require.Error(t, err)
	require.Contains(t, out, "GPUs 0000:10:00.0 (rank 0) and 0000:12:00.0 (rank 1) cannot access each other's memory", out)
}
