package devroute

import (
	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/internal/route"
)

// A collective of a one-rank communicator on device buffers is a copy of the input
// into the output (every reduction of one value is that value, avg included), or
// nothing in place: it can be enqueued as one device-to-device copy on the caller's
// stream (cuMemcpyDtoDAsync), ordered and recorded like any device-path operation,
// with no scratch, no flags and no watcher, where staging copies the message to host
// memory and back. That copy is the one-rank case of the same-GPU path (route's
// RouteSameGPU): auto takes it once the GPU check has proven it for one rank, and
// GONCCL_DEVICE_PATH=samegpu or model asks for it by name. GONCCL_DEVICE_PATH=1 still
// takes the device path, 0 stages.

// tryOneRankCopy runs the collective as that copy if the communicator has one rank
// and its mode takes the copy (ok false otherwise). bufs are the collective's, in its
// order: the first one it reads is the source, the first one it writes the target.
func (v *Views) tryOneRankCopy(c *core.Comm, rec devRecord, dt core.DataType, bufs []buf) (*core.Request, bool, error) {
	e := v.e
	if c.Size() != 1 || !oneRankCopies(e.devMode) {
		return nil, false, nil
	}
	e.devMu.Lock()
	if !e.devDecided { // decided: no device path (what else there is stages)
		e.devDecided = true
		e.devSetup, e.devSetupKnown = route.OneRank, true
		logDevice(c, "one rank: a collective on device buffers is a device-to-device copy on the stream ("+oneRankCopyWhy(e.devMode)+"; GONCCL_DEVICE_PATH=1 takes the device path anyway)")
	}
	e.devMu.Unlock()
	src, dst := -1, -1
	for i, b := range bufs {
		if b.name == "" {
			continue
		}
		if b.in && src < 0 {
			src = i
		}
		if b.out && dst < 0 {
			dst = i
		}
	}
	req, err := v.runDevice(c, rec, dt, func(ptrs []uintptr) error {
		if src < 0 || dst < 0 || ptrs[src] == ptrs[dst] {
			return nil // nothing to move (in place, or nothing written on this rank)
		}
		n := min(bufs[src].n, bufs[dst].n) * uint64(dt.Size())
		return v.drv.CopyDevice(v.ctx, ptrs[dst], ptrs[src], int(n), v.stream)
	}, bufs...)
	return req, true, err
}

// oneRankCopies reports whether a one-rank communicator in mode m takes the copy.
func oneRankCopies(m devMode) bool {
	switch m {
	case devSameGPU, devModel:
		return true
	case devAuto:
		return route.IsProven(route.OneRank, route.RouteSameGPU)
	}
	return false
}

// oneRankCopyWhy is the INIT log's reason for the copy.
func oneRankCopyWhy(m devMode) string {
	switch m {
	case devSameGPU:
		return "GONCCL_DEVICE_PATH=samegpu, not yet proven on hardware"
	case devModel:
		return "GONCCL_DEVICE_PATH=model, not yet proven on hardware"
	}
	return route.Verdict(route.OneRank, route.RouteSameGPU)
}
