package core

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Per-hop timing (GONCCL_DEBUG_HOPS=1): where the time of one operation goes between
// the caller issuing it and the caller seeing it finished. Each hop is an interval
// between two stamps of CLOCK_MONOTONIC (the clock the C++ backend stamps its own hops
// with, so that the two tables add up); the process keeps a sum and a count per hop,
// which HopStats reads (goncclDebugHops through the C ABI). Off, a stamp costs one
// atomic load.
//
//	enqueue   Comm.enqueue entered (the C ABI call is in Go) -> op in the queue
//	queue     op in the queue -> the executor (or an inline waiter) starts it
//	run       started -> its algorithm returned: sends, the peers' wake-up and
//	          frames, reductions
//	finish    algorithm returned -> request completed (trace, hooks)
//	callback  request completed -> its completion callback returned (the C++ backend's
//	          hand-over to its completion thread)
//	wake      request completed -> a waiter in Request.Wait sees it (spin or sleep)
//	device    a device-path operation issued (IssueDeviceOp) -> its work enqueued on
//	          the stream (after waiting for earlier operations on it; see devtrace.go)

// Hop is one measured interval of an operation's path.
type Hop int

// The hops core measures.
const (
	HopEnqueue Hop = iota
	HopQueue
	HopRun
	HopFinish
	HopCallback
	HopWake
	HopDevice
	numHops
)

var hopNames = [numHops]string{"go: enqueue", "go: queue -> start", "go: run (algorithm, peers)",
	"go: finish (trace, hooks)", "go: completion callback", "go: waiter wake-up", "go: device path: issue -> on the stream"}

func (h Hop) String() string { return hopNames[h] }

// HopStat is the total time spent in one hop over Count operations.
type HopStat struct {
	Hop   Hop
	Count int64
	Total time.Duration
}

var hops struct {
	on         atomic.Bool
	sum, count [numHops]atomic.Int64
}

// EnableHops turns per-hop timing on for this process (GONCCL_DEBUG_HOPS does it at
// communicator creation).
func EnableHops() { hops.on.Store(true) }

// HopStats returns the sums so far, and resets them if reset is set.
func HopStats(reset bool) []HopStat {
	out := make([]HopStat, numHops)
	for h := range numHops {
		if reset {
			out[h] = HopStat{Hop(h), hops.count[h].Swap(0), time.Duration(hops.sum[h].Swap(0))}
		} else {
			out[h] = HopStat{Hop(h), hops.count[h].Load(), time.Duration(hops.sum[h].Load())}
		}
	}
	return out
}

// hopNow returns CLOCK_MONOTONIC in ns, or 0 when hop timing is off.
func hopNow() int64 {
	if !hops.on.Load() {
		return 0
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// hopEnd records hop h as from start to now and returns now (0 if off or unstamped).
func hopEnd(h Hop, start int64) int64 {
	if start == 0 {
		return 0
	}
	now := hopNow()
	if now == 0 {
		return 0
	}
	hops.sum[h].Add(now - start)
	hops.count[h].Add(1)
	return now
}
