package cuda

import (
	"fmt"

	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/cuda/topology"
)

// The device path speaks the driver package's types: its API takes a *Driver, a Context
// and a Stream, and its code the driver's events, waiter and record fields.
type (
	// Driver is a loaded CUDA driver library (driver.Driver).
	Driver = driver.Driver
	// Context is a CUcontext (driver.Context).
	Context = driver.Context
	// Stream is a CUstream (driver.Stream).
	Stream = driver.Stream
	// Error is a failed driver call (driver.Error).
	Error = driver.Error
	// MPSStatus is whether this process is an MPS client on its GPU (topology.MPSStatus).
	MPSStatus = topology.MPSStatus
	// Reducer is what the device path needs of the reduction kernels (kernels.Reducer).
	Reducer = kernels.Reducer

	event    = driver.Event
	waiter   = driver.Waiter
	sgDriver = driver.IPCEvents
)

// StreamLegacy is CU_STREAM_LEGACY (driver.StreamLegacy).
const StreamLegacy = driver.StreamLegacy

const (
	ipcHandleSize      = driver.IPCHandleSize
	ipcEventHandleSize = driver.IPCEventHandleSize
	busIDBytes         = driver.BusIDBytes
)

var processID = driver.ProcessID

func logInfo(msg string) { driver.LogInfo(msg) }

func nulTerminated(b []byte) string { return driver.NulTerminated(b) }

// SetTestFault makes every package of this process commit fault ("" for none): the device
// path's "skip-ready-wait" (read the peers' data areas without waiting for their ready
// flags) and "offset" (read each peer's data one element early) among them. For tests
// only.
func SetTestFault(f string) { driver.SetTestFault(f) }

func fault(name string) bool { return driver.TestFault(name) }

// openSameGPUDriver resolves the inter-process event entry points; without them
// neither device windows nor the same-GPU path can run (ErrNotShared).
func openSameGPUDriver(d *Driver) (*sgDriver, error) {
	g, err := driver.OpenIPCEvents(d)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotShared, err)
	}
	return g, nil
}
