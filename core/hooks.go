package core

import "time"

// Hooks run around one operation on the executor, in the communicator's issue order.
// They are how device buffers are staged (package cuda, wired by capi) without core
// knowing about devices: Before moves inputs into the host buffers the operation was
// issued with, After moves the results out.
type Hooks struct {
	// Before runs just before the algorithm, with the operation's deadline. Its error
	// fails the operation (and the communicator) as an algorithm's error would, so
	// peers waiting for this rank are released.
	Before func(deadline time.Time) error
	// After runs once the operation has finished or failed (also if it never ran),
	// with its error, before the request completes. Its own error fails the request
	// but not the communicator: every rank finished the collective.
	After func(opErr error) error
}

// OpOption changes how one operation runs.
type OpOption func(*op)

// WithHooks runs h around the operation.
func WithHooks(h Hooks) OpOption { return func(o *op) { o.hooks = h } }

// WithWireCount makes the operation's frames carry count as its element count instead
// of its own (peers check it against theirs): for one chunk of a larger operation that
// every rank splits the same way (capi's pipelined staging), so that each chunk's frames
// name the whole operation's count and an operation of a chunk's size on another rank
// is still a mismatch.
func WithWireCount(count int) OpOption { return func(o *op) { o.wire = uint64(count) } }

// WaitedAtOnce says the caller will wait for the operation's request at once, without
// a timeout, on the goroutine that issued it (a blocking C ABI call): that wait runs
// the operation itself (see inline.go) unless another is running queued operations,
// and whoever is ends with the queue empty or wakes the executor. So issuing it does
// not wake the executor, whose wake-up is a thread's (on a host with more ranks than
// cores, the executor woken for nothing by every small all_reduce was a third of its
// context switches, and it sometimes took the operation from the waiter, whose own
// wake-up then cost as much again).
func WaitedAtOnce() OpOption { return func(o *op) { o.waited = true } }
