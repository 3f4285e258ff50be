package driver

import "time"

// The calls below make ctx current themselves (see Do): for callers that hold no
// context, the tests among them.

// MemAllocIn allocates n bytes of device memory in ctx.
func (d *Driver) MemAllocIn(ctx Context, n int) (p uintptr, err error) {
	err = d.Do(ctx, func() error { p, err = d.MemAlloc(n); return err })
	return p, err
}

// MemFreeIn frees device memory MemAllocIn allocated in ctx.
func (d *Driver) MemFreeIn(ctx Context, p uintptr) error {
	return d.Do(ctx, func() error { return d.MemFree(p) })
}

// Sync waits until the work queued on s so far has run. The caller has s's context
// current.
func (d *Driver) Sync(s Stream) error {
	e, err := d.EventCreate()
	if err != nil {
		return err
	}
	defer d.EventDestroy(e)
	if err := d.EventRecord(e, s); err != nil {
		return err
	}
	for {
		done, err := d.EventDone(e)
		if done || err != nil {
			return err
		}
		time.Sleep(20 * time.Microsecond)
	}
}
