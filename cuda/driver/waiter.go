package driver

import "time"

// Waiter paces a host loop that polls for GPU work (cuEventQuery) or for other ranks: it
// sleeps, starting at minPause and doubling up to maxPause, so that a short wait costs a
// few polls and a long one no CPU. This is the pacing of the staged path that ran on the
// H100 (e18d63d); spinning on the query for the first 100 us instead (99abc64) made a
// small operation's wait a few hundred microseconds shorter on the fake, for up to a
// hundred driver calls per wait (TestAutoDefaultPathDriverCalls bounds them).
type Waiter struct {
	pause time.Duration
	sleep func(time.Duration) // time.Sleep unless a test sets it
}

const (
	minPause = 10 * time.Microsecond
	maxPause = time.Millisecond
)

// Wait returns after one sleep, each twice the last, from minPause up to maxPause.
func (w *Waiter) Wait() {
	sleep := w.sleep
	if sleep == nil {
		sleep = time.Sleep
	}
	if w.pause == 0 {
		w.pause = minPause
	} else {
		w.pause = min(2*w.pause, maxPause)
	}
	sleep(w.pause)
}
