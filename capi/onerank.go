package main

import "github.com/gonccl/gonccl/core"

// A collective of a one-rank communicator on device buffers is a copy of the input
// into the output (every reduction of one value is that value, avg included), or
// nothing in place: under auto it is enqueued as one device-to-device copy on the
// caller's stream (cuMemcpyDtoDAsync), ordered and recorded like any device-path
// operation, with no scratch, no flags and no watcher; staging would copy the message
// to host memory and back. GONCCL_DEVICE_PATH=1 still takes the device path, 0 stages.

// tryOneRankCopy runs the collective as that copy if the communicator has one rank
// and chooses its path itself (ok false otherwise). bufs are the collective's, in its
// order: the first one it reads is the source, the first one it writes the target.
func (v *views) tryOneRankCopy(c *core.Comm, rec devRecord, dt core.DataType, bufs []buf) (*core.Request, bool, error) {
	if c.Size() != 1 || !v.e.devMode.automatic() {
		return nil, false, nil
	}
	e := v.e
	e.devMu.Lock()
	if !e.devDecided { // decided: no device path (what else there is stages)
		e.devDecided = true
		logDevice(c, "one rank: a collective on device buffers is a device-to-device copy on the stream (GONCCL_DEVICE_PATH=1 takes the device path anyway)")
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
