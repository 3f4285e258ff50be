package cuda_test

import "testing"

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
	requireLayoutsPass(t, "0,1,2", "0,0,1,2")
}

// TestDeviceRingWrongStepFails shows the comparison sees a ring that reads its
// predecessor's chunk without waiting for its flag ("skip-ring-wait"): the fake's
// copies and kernels run late, so partial sums are read before they are written.
func TestDeviceRingWrongStepFails(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_RING", "1,256")
	t.Setenv("GONCCL_DEVTEST_ONLY", "all_reduce")
	requireFaultsCaught(t, "0,1,2", "50,500", "skip-ring-wait")
}
