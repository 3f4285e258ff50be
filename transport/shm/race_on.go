//go:build race

package shm

import "sync/atomic"

// The race detector does not see atomics on memory outside the Go heap, so the order
// that head and tail in the shared segment impose between a sender and its receiver
// is invisible to it, and a collective whose causality runs through several links
// looks racy. Under -race, every publish also releases, and every observation
// acquires, this Go variable, which carries the same order to the detector.
var raceClock atomic.Uint64

func raceRelease() { raceClock.Add(1) }
func raceAcquire() { raceClock.Load() }
