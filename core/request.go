package core

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Request is the handle of one enqueued operation. It completes exactly once, with nil
// or the operation's error.
type Request struct {
	done   chan struct{}
	fin    atomic.Bool // set just before done is closed: what Wait polls
	doneAt int64       // hop timing: when it completed (see hops.go)
	owner  *Comm       // a collective's communicator, whose queue Wait may run (inline.go)

	mu       sync.Mutex
	finished bool
	err      error
	onDone   func(error)
	source   int // see Source
}

func newRequest() *Request { return &Request{done: make(chan struct{}), source: -1} }

// Source is the rank a receive's message came from (for AnySource receives, known once
// the message has matched), the peer of a send, or -1 for collectives.
func (r *Request) Source() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.source
}

func (r *Request) setSource(rank int) {
	r.mu.Lock()
	r.source = rank
	r.mu.Unlock()
}

// complete finishes the request and runs its callback, if one is registered.
func (r *Request) complete(err error) { r.finish(err, false) }

// finish is complete; with laterCallback the callback runs on a goroutine of its own.
func (r *Request) finish(err error, laterCallback bool) {
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	r.finished, r.err = true, err
	fn := r.onDone
	r.onDone = nil
	r.mu.Unlock()
	r.fin.Store(true)
	close(r.done)
	switch {
	case fn == nil:
	case laterCallback:
		// Only a waiter's own operation (inline.go), so owner is set. A panic in fn
		// (a C callback) is logged; the request has finished already.
		r.owner.guard.Go("request callback", nil, nil, func() { r.callback(fn, err) })
	default:
		r.callback(fn, err)
	}
}

func (r *Request) callback(fn func(error), err error) {
	fn(err)
	hopEnd(HopCallback, r.doneAt)
}

// Done is closed when the request has finished.
func (r *Request) Done() <-chan struct{} { return r.done }

// Test reports whether the request has finished and, if so, its error.
func (r *Request) Test() (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finished, r.err
}

// Wait blocks until the request finishes or timeout passes (timeout < 0: no limit of
// its own; the operation's deadline still ends it). It reports whether the request
// finished, and its error if so. Without a timeout of its own, the operation of a
// collective's request, and those queued before it, may run on the caller's goroutine
// if the executor is not running one (see inline.go); otherwise Wait polls briefly
// before it sleeps (see spin.go).
func (r *Request) Wait(timeout time.Duration) (bool, error) {
	if timeout < 0 && r.owner != nil && !r.fin.Load() {
		r.owner.runInline(r)
	}
	if r.fin.Load() || (timeout != 0 && waitSpin.spin(r.fin.Load)) {
		return r.woken()
	}
	if timeout < 0 {
		<-r.done
		return r.woken()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
		return r.woken()
	case <-t.C:
		return false, nil
	}
}

// woken is Wait's result once the request has finished.
func (r *Request) woken() (bool, error) {
	<-r.done // closed: orders the read of doneAt after complete's write
	hopEnd(HopWake, r.doneAt)
	return r.Test()
}

// OnComplete registers fn to run once when the request finishes, on the goroutine that
// finishes it; if it already has, fn runs now on the caller's goroutine. A later call
// replaces an earlier callback that has not run yet.
func (r *Request) OnComplete(fn func(error)) {
	r.mu.Lock()
	if r.finished {
		err := r.err
		r.mu.Unlock()
		fn(err)
		return
	}
	r.onDone = fn
	r.mu.Unlock()
}

// Then returns a request that completes after r: once r has finished, fn runs with r's
// error (on the goroutine that finished r), and the new request completes with r's
// error or, if r succeeded, fn's. It carries r's Source. r's own callback slot is
// taken: use only the returned request. A panic in fn fails the request.
func (r *Request) Then(fn func(error) error) *Request {
	next := newRequest()
	next.source = r.Source()
	r.OnComplete(func(err error) {
		next.setSource(r.Source())
		ferr := func() (ferr error) {
			defer func() {
				if p := recover(); p != nil {
					ferr = fmt.Errorf("gonccl: panic after the operation: %v", p)
				}
			}()
			return fn(err)
		}()
		if err == nil {
			err = ferr
		}
		next.complete(err)
	})
	return next
}
