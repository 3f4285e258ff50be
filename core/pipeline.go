package core

import "sync"

// pipe is a two-sided schedule for exec.pipeline: receive units 0..nrecv-1 run in order
// on the calling goroutine and send units 0..nsend-1 in order on another, so that
// sending, receiving and reducing of different chunks overlap. Two counts tie the sides
// together:
//
//	need(u): send unit u starts once need(u) receive units have completed (what it
//	         forwards has arrived); nil: it never waits.
//	free(v): receive unit v starts once free(v) send units have completed (the staging
//	         slot it fills has been forwarded); nil: receiving never waits.
//
// With free, units take turns in a few slots of staging memory: unit v's slot is free
// again once the send that forwards the unit before it in that slot has finished.
type pipe struct {
	nsend, nrecv int
	need, free   func(u int) int
	send, recv   func(u int) error
}

// pipeline runs p and returns the operation's first error. A failure (e.fail closes the
// links, so a unit under way returns) stops the sender before any unit but the first,
// which still goes out within the links' grace period if what it forwards has arrived:
// its header lets the peer diagnose a mismatch itself. A receiver with a free count
// starts no more units; one without finds the links closed at its next unit.
//
// The sending goroutine is "pipeline sender", or "window sender" when p has a free
// count: the name a panic's error carries (see safety.go).
func (e *exec) pipeline(p pipe) error {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	received, sent, stopped := 0, 0, false // stopped: the operation failed
	stop := func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		cond.Broadcast()
	}
	// wait blocks until *counter >= n or the operation stopped; it reports whether
	// to go on.
	wait := func(counter *int, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		for *counter < n && !stopped {
			cond.Wait()
		}
		return !stopped
	}
	reached := func(counter *int, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		return *counter >= n
	}
	bump := func(counter *int) {
		mu.Lock()
		*counter++
		mu.Unlock()
		cond.Broadcast()
	}
	need := func(u int) int {
		if p.need == nil {
			return 0
		}
		return p.need(u)
	}
	var wg sync.WaitGroup
	defer e.joinOnPanic(stop, &wg)
	if p.nsend > 0 {
		name := "pipeline sender"
		if p.free != nil {
			name = "window sender"
		}
		e.guard.Go(name, &wg, func(err error) { e.fail(err); stop() }, func() {
			for u := 0; u < p.nsend; u++ {
				n := need(u)
				if !wait(&received, n) && (u > 0 || !reached(&received, n)) {
					return
				}
				if err := p.send(u); err != nil {
					e.fail(err)
					stop()
					return
				}
				bump(&sent)
			}
		})
	}
	for v := 0; v < p.nrecv; v++ {
		if p.free != nil && !wait(&sent, p.free(v)) {
			break
		}
		if err := p.recv(v); err != nil {
			e.fail(err)
			stop()
			break
		}
		bump(&received)
	}
	wg.Wait()
	return e.result()
}
