package core

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Spin bounds for the waits on an operation's path (a waiter for its request, the
// executor for the next operation): a wait polls for up to an adaptive budget before
// it sleeps. Waking a sleeping thread costs tens of microseconds on a loaded machine,
// more than a small collective itself, so a waiter that polls briefly keeps the
// sleep/wake pair off the path of back-to-back small operations. The budget doubles
// when a poll saw the event and halves when it did not, down to minWaitSpin: where
// waits are long (large operations) or the pollers outnumber the cores (many ranks on
// a small host: the poller would take the core its peer needs) it shrinks to almost
// nothing, and every few polls the poller yields its thread.
const (
	minWaitSpin = 1 * time.Microsecond
	maxWaitSpin = 50 * time.Microsecond
)

// noSpin turns polling off (GONCCL_FAST_PATH=0, set by the last communicator created).
var noSpin atomic.Bool

// spinner is one kind of wait's adaptive budget (shared by the goroutines that wait
// that way; a stale read only makes one spin a little longer or shorter).
type spinner struct{ budget atomic.Int64 }

// spin polls ready until it returns true or the budget passes, and reports whether it
// did.
func (s *spinner) spin(ready func() bool) bool {
	if noSpin.Load() {
		return false
	}
	b := time.Duration(s.budget.Load())
	if b < minWaitSpin {
		b = minWaitSpin
	}
	start := time.Now()
	for i := 1; ; i++ {
		if ready() {
			s.budget.Store(int64(min(2*b, maxWaitSpin)))
			return true
		}
		if i%16 == 0 {
			if time.Since(start) > b {
				break
			}
			runtime.Gosched()
		}
	}
	s.budget.Store(int64(max(b/2, minWaitSpin)))
	return false
}

var (
	waitSpin spinner // Request.Wait
	execSpin spinner // the executor, for the next operation
)
