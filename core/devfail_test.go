package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// FailDevice: the device path's watcher found a failure the executor never saw. The
// communicator breaks with it (later operations fail naming it), and the device
// operations still on the GPU are marked failed.
func TestFailDeviceBreaksTheCommunicator(t *testing.T) {
	comms := memComms(t, 2, func(c *config) { c.traceSize = 16 })
	c := comms[0]
	done, err := c.IssueDeviceOp(KindAllReduce, Float32, Sum, -1, 4)
	require.NoError(t, err)
	done.OnGPU(func() (bool, error) { return true, nil })
	stuck, err := c.IssueDeviceOp(KindAllReduce, Float32, Sum, -1, 4)
	require.NoError(t, err)
	stuck.OnGPU(func() (bool, error) { return false, nil })
	require.Equal(t, TraceCompleted, c.Trace()[0].State)

	cause := fmt.Errorf("%w: rank 0: device-path all_reduce: rank 1 differs in count", ErrMismatch)
	c.FailDevice(cause)
	require.ErrorIs(t, c.Err(), ErrMismatch)
	require.ErrorContains(t, c.Err(), "rank 1 differs in count")
	tr := c.Trace()
	require.Equal(t, TraceCompleted, tr[0].State, "an op the GPU had finished stays completed")
	require.Equal(t, TraceFailed, tr[1].State)
	require.Contains(t, tr[1].Err, "released: ")
	req, err := c.AllReduce(make([]byte, 8), make([]byte, 8), 2, Float32, Sum)
	if err == nil {
		_, err = req.Wait(-1)
	}
	require.ErrorContains(t, err, "rank 1 differs in count", "a later operation names the cause")
}
