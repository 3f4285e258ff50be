package driver

import (
	"runtime"
	"time"
)

// Waiter paces a host loop that polls for GPU work (cuEventQuery) or for other ranks. It
// spins, yielding the processor, for the first spinFor: a small operation's copies finish
// within microseconds, and a sleep costs more than that (Go's timers round short sleeps
// up). Then it sleeps, starting at minPause and doubling up to maxPause, so that a long
// wait costs no CPU.
type Waiter struct {
	start time.Time
	pause time.Duration
	now   func() time.Time    // time.Now unless a test sets it
	sleep func(time.Duration) // time.Sleep unless a test sets it
}

const (
	spinFor  = 100 * time.Microsecond
	minPause = 20 * time.Microsecond
	maxPause = time.Millisecond
)

// wait returns after one spin (yield) or one sleep, whichever the time waited so far calls for.
func (w *Waiter) Wait() {
	now, sleep := w.now, w.sleep
	if now == nil {
		now = time.Now
	}
	if sleep == nil {
		sleep = time.Sleep
	}
	if w.start.IsZero() {
		w.start = now()
	}
	if now().Sub(w.start) < spinFor {
		runtime.Gosched()
		return
	}
	if w.pause == 0 {
		w.pause = minPause
	} else {
		w.pause = min(2*w.pause, maxPause)
	}
	sleep(w.pause)
}
