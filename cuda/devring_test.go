package cuda_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The device ring (devring.go) against the fake driver, ranks in separate processes on
// separate devices (and, at 0,0,1,2, two of them on one): the all_reduce and
// reduce_scatter cases of the device path's script (every dtype and reduction), all of
// at least one byte by the ring, in chunks of 256 bytes so that a step's segment of
// the 4 KiB scratch is cut into several; each result is compared with core's host
// collective.
func TestDeviceRingAcrossProcesses(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_RING", "1,256")
	t.Setenv("GONCCL_DEVTEST_ONLY", "all_reduce,reduce_scatter")
	for _, layout := range []string{"0,1,2", "0,0,1,2"} {
		t.Run(strings.ReplaceAll(layout, ",", "-"), func(t *testing.T) {
			out, err := runDevRanks(t, layout, "", "0,200")
			require.NoError(t, err, "%s", out)
		})
	}
}

// TestDeviceRingWrongStepFails shows the comparison sees a ring that reads its
// predecessor's chunk without waiting for its flag ("skip-ring-wait"): the fake's
// copies and kernels run late, so partial sums are read before they are written.
func TestDeviceRingWrongStepFails(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_RING", "1,256")
	t.Setenv("GONCCL_DEVTEST_ONLY", "all_reduce")
	out, err := runDevRanks(t, "0,1,2", "skip-ring-wait", "50,500")
	require.Error(t, err, "the skip-ring-wait fault went unnoticed:\n%s", out)
	require.Contains(t, out, "MISMATCH", "%s", out)
}
