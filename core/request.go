package core

import (
	"fmt"
	"sync"
	"time"
)

// Request is the handle of one enqueued operation. It completes exactly once, with nil
// or the operation's error.
type Request struct {
	done chan struct{}

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
func (r *Request) complete(err error) {
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		return
	}
	r.finished, r.err = true, err
	fn := r.onDone
	r.onDone = nil
	r.mu.Unlock()
	close(r.done)
	if fn != nil {
		fn(err)
	}
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
// finished, and its error if so.
func (r *Request) Wait(timeout time.Duration) (bool, error) {
	if timeout < 0 {
		<-r.done
		return r.Test()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
		return r.Test()
	case <-t.C:
		return false, nil
	}
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
