package cuda

import (
	"time"
	"unsafe"
)

// KernelNames lists the name of every kernel ReduceInto, DivideBy and ReduceMany launch.
func KernelNames() []string {
	var names []string
	for _, k := range kernelKeys() {
		names = append(names, kernelName(k))
	}
	return names
}

// Fatbin is the embedded kernel image.
var Fatbin = fatbin

// Do runs f with ctx current on a locked thread.
func (d *Driver) Do(ctx Context, f func() error) error { return d.do(ctx, f) }

// HostAlloc allocates n bytes of pinned host memory, which a GPU with unified addressing
// reaches at the same address.
func (d *Driver) HostAlloc(n int) (unsafe.Pointer, error) { return d.hostAlloc(n) }

// HostFree frees what HostAlloc allocated.
func (d *Driver) HostFree(p unsafe.Pointer) error { return d.hostFree(p) }

// Sync waits until the work queued on s so far has run. The caller has s's context
// current.
func (d *Driver) Sync(s Stream) error {
	e, err := d.eventCreate()
	if err != nil {
		return err
	}
	defer d.eventDestroy(e)
	if err := d.eventRecord(e, s); err != nil {
		return err
	}
	for {
		done, err := d.eventDone(e)
		if done || err != nil {
			return err
		}
		time.Sleep(20 * time.Microsecond)
	}
}

// BackStream is the stream a pipelined staging copies back on: gonccl's own, or the
// staging's where it has none.
func (s *Staging) BackStream() Stream {
	if s.ch != nil && s.ch.back != 0 {
		return s.ch.back
	}
	return s.stream
}

// SetRingChunk sets the size of the device ring's chunks (devring.go) in this process.
func SetRingChunk(n int) { ringChunkBytes = n }
