package core

import "sync"

// pipe is a two-sided schedule for exec.pipeline: receive units 0..nrecv-1 run in order
// on the calling goroutine and send units 0..nsend-1 in order on another, so that
// sending, receiving and reducing of different chunks overlap. Two counts tie the sides
// together:
//
//	need(u): send unit u starts once need(u) receive units have completed (what it
//	         forwards has arrived); nil: it never waits.
//	free(v): receive unit v starts once free(v) send units have completed (the memory
//	         it fills has been sent from for the last time); nil: receiving never waits.
//
// With free, units may take turns in a few slots of staging memory (window: unit v's
// slot is free again once the send that forwards the unit before it in that slot has
// finished), or a receive may overwrite what an earlier send read from: a transport
// may read a send's buffer until Send returns, and even where the peer cannot send
// what the receive waits for before it has all of that send, only free orders the
// two in this process.
type pipe struct {
	nsend, nrecv int
	need, free   func(u int) int
	send, recv   func(u int) error
	window       bool // free bounds staging slots: the sender is a "window sender"
}

// pipeline runs p and returns the operation's first error. A failure (e.fail closes the
// links, so a unit under way returns) stops the sender before any unit but the first,
// which still goes out within the links' grace period if what it forwards has arrived:
// its header lets the peer diagnose a mismatch itself. A receiver with a free count
// starts no more units; one without finds the links closed at its next unit.
//
// The sending goroutine is "pipeline sender", or "window sender" when p.window: the
// name a panic's error carries (see safety.go).
func (e *exec) pipeline(p pipe) error {
	s := &pipeRun{pipe: p}
	s.cond.L = &s.mu
	defer e.joinOnPanic(s.stop, &s.wg)
	if p.nsend > 0 {
		name := "pipeline sender"
		if p.window {
			name = "window sender"
		}
		e.guard.Go(name, &s.wg, func(err error) { e.fail(err); s.stop() }, func() { e.pipeSend(s) })
	}
	for v := 0; v < p.nrecv; v++ {
		if p.free != nil && !s.wait(&s.sent, p.free(v)) {
			break
		}
		if err := p.recv(v); err != nil {
			e.fail(err)
			s.stop()
			break
		}
		s.bump(&s.received)
	}
	s.wg.Wait()
	return e.result()
}

// pipeSend is pipeline's sending goroutine.
func (e *exec) pipeSend(s *pipeRun) {
	for u := 0; u < s.nsend; u++ {
		n := 0
		if s.need != nil {
			n = s.need(u)
		}
		if !s.wait(&s.received, n) && (u > 0 || !s.reached(&s.received, n)) {
			return
		}
		if err := s.send(u); err != nil {
			e.fail(err)
			s.stop()
			return
		}
		s.bump(&s.sent)
	}
}

// pipeRun is one run of a pipe: what its two sides share, in one allocation.
type pipeRun struct {
	pipe
	wg             sync.WaitGroup // the sending goroutine
	mu             sync.Mutex
	cond           sync.Cond // on mu: a count went up, or the run stopped
	received, sent int       // units completed
	stopped        bool      // the operation failed
}

func (s *pipeRun) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.cond.Broadcast()
}

// wait blocks until *counter >= n or the run stopped; it reports whether to go on.
func (s *pipeRun) wait(counter *int, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for *counter < n && !s.stopped {
		s.cond.Wait()
	}
	return !s.stopped
}

func (s *pipeRun) reached(counter *int, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *counter >= n
}

func (s *pipeRun) bump(counter *int) {
	s.mu.Lock()
	*counter++
	s.mu.Unlock()
	s.cond.Broadcast()
}
