package main

import (
	"math"
	"time"
)

// msDuration is timeoutMs, a count of milliseconds from C, as a time.Duration: zero
// for zero or less (a deadline already passed; see goncclCommSetTimeout), and the
// largest Duration for counts beyond it (about 292 years) instead of a product that
// wraps around to a negative, or a small, duration.
func msDuration(timeoutMs int64) time.Duration {
	switch {
	case timeoutMs <= 0:
		return 0
	case timeoutMs > math.MaxInt64/int64(time.Millisecond):
		return math.MaxInt64
	}
	return time.Duration(timeoutMs) * time.Millisecond
}
