package devroute

import (
	"errors"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/internal/route"
)

// Comm is the router's state of one communicator: its settings, read once when it
// was created, the paths its first operation on device buffers set up, and the
// pinned staging pool.
type Comm struct {
	comm *core.Comm
	poolState
	devState
}

// NewComm makes the router's state for c, reading the settings that choose its paths
// now. A setting it cannot read fails the communicator's first operation on device
// buffers, naming it.
func NewComm(c *core.Comm) *Comm {
	e := &Comm{comm: c}
	e.set = c.DeviceSettings()
	e.devMode, e.devOffWhy = devModeOf(e.set)
	if costs, err := route.ParseCosts(e.set.PathCost); err != nil && e.devModeErr == nil {
		e.devModeErr = err
	} else {
		e.devCosts = costs
	}
	return e
}

// Destroy frees the device paths (collectively: every rank destroys) and, once every
// operation has finished, the pinned staging pool. With abort, or on a broken
// communicator, nothing is collective: see closeDevice. Destroy runs before the
// communicator's own Destroy (the device paths' close is collective); ClosePool after.
func (e *Comm) Destroy(abort bool) error { return e.closeDevice(abort) }

// ClosePool frees the pinned staging memory once every operation has finished.
func (e *Comm) ClosePool() error { return e.closePool() }

// Suspend frees the device paths (collectively, as at destroy) and the pinned pool;
// the next operation on device buffers sets them up again.
func (e *Comm) Suspend() error {
	derr := e.closeDevice(false)
	e.devMu.Lock()
	e.devDecided = false // the next device operation decides, and sets up, again
	e.devMu.Unlock()
	err := errors.Join(derr, e.closePool())
	e.poolMu.Lock()
	e.poolClosed = false // made again on first use after resume
	e.poolMu.Unlock()
	return err
}

// Memory is the CUDA memory the communicator holds: pinned host staging, and device
// scratch of the device path.
func (e *Comm) Memory() (pinned, deviceScratch int64) {
	e.poolMu.Lock()
	if e.pool != nil {
		pinned = int64(e.pool.Stats().Bytes)
	}
	e.poolMu.Unlock()
	e.devMu.Lock()
	if e.devShared != nil {
		deviceScratch = int64(e.devShared.Cap())
	}
	e.devMu.Unlock()
	return pinned, deviceScratch
}
