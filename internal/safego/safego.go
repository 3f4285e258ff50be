// Package safego starts gonccl's goroutines so that a panic in one fails what that
// goroutine was doing, instead of killing the process.
//
// In Go, a panic that no function on its goroutine recovers ends the whole process:
// inside Python that is the training job, with no Python exception and no chance to
// save anything. Exported C functions recover their own panics (capi's guard), but
// the goroutines gonccl starts (the executor, an algorithm's sending goroutines, the
// point-to-point reader and writer, heartbeats, link helpers, bootstrap) run on their
// own stacks. Every one of them is started with Guard.Go, and every callback that runs
// on a goroutine of the runtime's (time.AfterFunc) is wrapped with Guard.Func: a panic
// becomes a *Panic error, logged at WARN with its stack and handed to the caller's
// onPanic, which fails the operation (or the link, or the communicator) it belongs to.
//
// This package must not import anything of gonccl's: core and transport both use it.
package safego

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
)

// ErrPanic is wrapped by every *Panic, so errors.Is(err, ErrPanic) finds one (capi
// maps it to goncclInternalError).
var ErrPanic = errors.New("internal error")

// Panic is a panic recovered on one of gonccl's goroutines.
type Panic struct {
	Site  string // which goroutine: "executor", "p2p reader", ...
	Value any    // what was passed to panic
	Stack []byte // the panicking goroutine's stack (logged, not in Error)
}

func (p *Panic) Error() string {
	return fmt.Sprintf("internal error: panic in gonccl's %s goroutine: %v (a gonccl bug: please report it with the stack logged at WARN)", p.Site, p.Value)
}

// Unwrap lets errors.Is match ErrPanic.
func (p *Panic) Unwrap() error { return ErrPanic }

// Guard says how recovered panics are reported. The zero value recovers and logs to
// stderr.
type Guard struct {
	// Warn logs a recovered panic's message and stack (nil: written to stderr).
	Warn func(msg string)
	// Inject, if set, is called with the site's name first thing on every goroutine
	// Go starts and in every Run and Func, inside the recovered region. It exists for
	// tests only, which panic from it to prove that each site recovers; it is nil in
	// production (see core's GONCCL_TEST_INJECT_PANIC, documented as test-only).
	Inject func(site string)
}

// Go runs f on a new goroutine. A panic in f is recovered, logged and passed as a
// *Panic to onPanic (if not nil) on the same goroutine. If wg is not nil, it is
// incremented before the goroutine starts and marked done after f (and onPanic) have
// returned, whether or not f panicked.
func (g Guard) Go(site string, wg *sync.WaitGroup, onPanic func(error), f func()) {
	if wg != nil {
		wg.Add(1)
	}
	go func() {
		if wg != nil {
			defer wg.Done()
		}
		defer g.recover(site, onPanic)
		g.inject(site)
		f()
	}()
}

// Run calls f on the caller's goroutine and returns its error, or, if f panics, the
// panic as a *Panic (logged): for units of work inside a long-lived goroutine (one
// operation of the executor) that must fail alone while the goroutine carries on.
func (g Guard) Run(site string, f func() error) (err error) {
	defer g.recover(site, func(p error) { err = p })
	g.inject(site)
	return f()
}

// Func returns f wrapped so that a panic in it is recovered, logged and passed to
// onPanic: for callbacks the runtime runs on goroutines of its own (time.AfterFunc).
func (g Guard) Func(site string, onPanic func(error), f func()) func() {
	return func() {
		defer g.recover(site, onPanic)
		g.inject(site)
		f()
	}
}

func (g Guard) inject(site string) {
	if g.Inject != nil {
		g.Inject(site)
	}
}

// recover is deferred directly by Go, Run and Func (recover only works there).
func (g Guard) recover(site string, onPanic func(error)) {
	r := recover()
	if r == nil {
		return
	}
	p := &Panic{Site: site, Value: r, Stack: debug.Stack()}
	g.warn(fmt.Sprintf("%v\n%s", p, p.Stack))
	if onPanic == nil {
		return
	}
	// A handler that panics in turn must not take the process down either.
	defer func() {
		if r := recover(); r != nil {
			g.warn(fmt.Sprintf("internal error: panic while handling a panic in gonccl's %s goroutine: %v\n%s", site, r, debug.Stack()))
		}
	}()
	onPanic(p)
}

func (g Guard) warn(msg string) {
	if g.Warn != nil {
		g.Warn(msg)
		return
	}
	fmt.Fprintf(os.Stderr, "gonccl WARN %s\n", msg)
}
