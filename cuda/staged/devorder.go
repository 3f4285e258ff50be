package staged

import (
	"fmt"
	"time"

	"github.com/gonccl/gonccl/cuda/driver"
)

// A device-path operation enqueues its work on the stream itself, while a staged
// operation issued before it queues its copies later, from the executor. To keep the
// stream in issue order, a device operation waits until every staging of the pool
// issued before it has queued its last copies (After, or Cancel), and for the Release
// of a held one, as Before does. It has a Staging of its own, without host memory,
// whose event EndDevice records after its work: WaitOn, Hold and Release work on it
// as on any staging, and it takes its turn in its stream's issue order across
// communicators (claimTurn) as a staging does.

// NewDevice registers a device-path operation on stream s (context ctx) with the
// pool. Then BeginDevice, enqueue the work, EndDevice; or Cancel.
func (p *Pool) NewDevice(ctx driver.Context, s driver.Stream) (*Staging, error) {
	st := &Staging{d: p.d, pool: p, ctx: ctx, stream: s, released: make(chan struct{}), queued: make(chan struct{})}
	err := p.d.Do(ctx, func() (err error) {
		st.ev, err = p.d.EventCreate()
		return err
	})
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.reclaimLocked()
	p.busy = append(p.busy, st)
	// Across communicators sharing the stream, it takes its turn as a staging does
	// (Stage): BeginDevice's Before waits for another pool's predecessor.
	if prev := claimTurn(st); prev != nil && prev.pool != p {
		st.prev = prev
	}
	p.mu.Unlock()
	return st, nil
}

// pendingLocked counts the stagings of the pool issued before st (p.busy is in
// issue order) that have not queued their last copies. p.mu held.
func (p *Pool) pendingLocked(st *Staging) int {
	n := 0
	for _, b := range p.busy {
		if b == st {
			break
		}
		b.mu.Lock()
		if !b.finished {
			n++
		}
		b.mu.Unlock()
	}
	return n
}

// DeviceReady reports whether st.BeginDevice would run without waiting: every staging
// issued before it has queued its copies, and the last one is not held.
func (p *Pool) DeviceReady(st *Staging) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pendingLocked(st) > 0 {
		return false
	}
	if last := p.last; last != nil {
		last.mu.Lock()
		held := last.held
		last.mu.Unlock()
		if held {
			select {
			case <-last.released:
			default:
				return false
			}
		}
	}
	return true
}

// BeginDevice waits, until deadline, for the stagings issued before st to have
// queued their copies and for a held one's Release.
func (st *Staging) BeginDevice(deadline time.Time) error {
	p := st.pool
	var w driver.Waiter
	for {
		p.mu.Lock()
		pending := p.pendingLocked(st)
		p.mu.Unlock()
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cuda: %d staged operation(s) issued before this one on stream %#x did not finish in time", pending, uintptr(st.stream))
		}
		w.Wait()
	}
	return st.Before(deadline) // waits for a held predecessor; copies nothing
}

// EndDevice records the completion event after the work the device operation
// enqueued (all of it, even when enqueuing failed half way).
func (st *Staging) EndDevice() error {
	st.mu.Lock()
	st.inFlight = true
	st.mu.Unlock()
	return st.After(nil)
}

// EndLater marks a device operation whose work another goroutine enqueues afterwards
// (an async point-to-point lane, devp2plane.go): the pool's later operations need not
// wait for it, as its stream's order is the lane's. EndDevice records its completion
// event once the last of its work is enqueued; until then Done says it is not done.
func (st *Staging) EndLater() {
	st.mu.Lock()
	if !st.recorded {
		st.finished, st.inFlight = true, true
	}
	st.mu.Unlock()
	st.markQueued()
}

// Done reports whether the GPU has run all the work the staging captured: false until
// EndDevice (or After) has recorded the completion event, then the event's state. Safe
// on any goroutine, and cheap (a cuEventQuery): the flight recorder asks it when the
// trace is read.
func (st *Staging) Done() (bool, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.done: // reclaimed: its event had completed
		return true, nil
	case !st.finished:
		return false, nil
	case !st.inFlight: // nothing was enqueued
		return true, nil
	case !st.recorded:
		return false, fmt.Errorf("cuda: the work on stream %#x could not be tracked by an event", uintptr(st.stream))
	}
	var ok bool
	err := st.d.Do(st.ctx, func() (err error) {
		ok, err = st.d.EventDone(st.ev)
		return err
	})
	return ok, err
}
