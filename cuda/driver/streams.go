package driver

import (
	"fmt"
	"sync"
)

// ownStreams are the streams gonccl created for itself, per device: handed out by
// OwnStream, given back by ReturnStream, never destroyed.
var ownStreams struct {
	sync.Mutex
	free     map[int][]Stream
	owner    map[Stream]int // every stream created, by device
	retained map[int]bool   // the device's primary context is retained for them
}

// OwnStream returns a stream of gonccl's own on device dev, not in use by anyone else:
// non-blocking, created with cuStreamCreate in the device's primary context, never one
// of torch's pool streams (which torch hands out round-robin to any caller, so another
// process group or the user's code could be queuing on it too). gonccl retains the
// primary context for as long as the process lives, so the stream stays valid after
// the runtime's teardown at exit. Give it back with ReturnStream; it is handed out
// again, never destroyed (work of a closed process group may still be queued on it or
// recorded against it).
func (d *Driver) OwnStream(dev int) (Stream, error) {
	ownStreams.Lock()
	defer ownStreams.Unlock()
	if n := len(ownStreams.free[dev]); n > 0 {
		s := ownStreams.free[dev][n-1]
		ownStreams.free[dev] = ownStreams.free[dev][:n-1]
		return s, nil
	}
	if ownStreams.owner == nil {
		ownStreams.free = make(map[int][]Stream)
		ownStreams.owner = make(map[Stream]int)
		ownStreams.retained = make(map[int]bool)
	}
	if !ownStreams.retained[dev] {
		if _, err := d.RetainPrimary(dev); err != nil {
			return 0, fmt.Errorf("device %d: %w", dev, err)
		}
		ownStreams.retained[dev] = true
	}
	ctx, err := d.PrimaryContext(dev)
	if err != nil {
		return 0, err
	}
	var s Stream
	err = d.Do(ctx, func() (err error) {
		s, err = d.StreamCreate()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("device %d: %w", dev, err)
	}
	ownStreams.owner[s] = dev
	return s, nil
}

// ReturnStream gives back a stream OwnStream handed out, for a later OwnStream.
func (d *Driver) ReturnStream(s Stream) error {
	ownStreams.Lock()
	defer ownStreams.Unlock()
	dev, ok := ownStreams.owner[s]
	if !ok {
		return fmt.Errorf("stream %#x is not one gonccl created", uintptr(s))
	}
	for _, f := range ownStreams.free[dev] {
		if f == s {
			return fmt.Errorf("stream %#x was already given back", uintptr(s))
		}
	}
	ownStreams.free[dev] = append(ownStreams.free[dev], s)
	return nil
}

// PrimaryContext is device dev's primary context, which the caller has retained.
func (d *Driver) PrimaryContext(dev int) (Context, error) {
	ctx, err := d.RetainPrimary(dev)
	if err != nil {
		return 0, err
	}
	return ctx, d.ReleasePrimary(dev)
}
