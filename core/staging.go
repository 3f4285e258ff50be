package core

import (
	"fmt"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// workBuf returns n bytes of the communicator's work memory: staging that outlives
// one chunk (reduce partials in flight, an all-to-all's copy of an overlapping send
// buffer). It lives outside the Go heap, grows as needed and is reused by later
// operations; Destroy and Abort free it. Only the executor calls it.
func (c *Comm) workBuf(n int) ([]byte, error) {
	if n <= len(c.work) {
		return c.work[:n], nil
	}
	size := max(n, 2*len(c.work), 1<<16)
	size = ceilDiv(size, unix.Getpagesize()) * unix.Getpagesize()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes of work memory: %w", size, err)
	}
	if err := c.freeWork(); err != nil {
		_ = unix.Munmap(b)
		return nil, err
	}
	c.work = b
	return b[:n], nil
}

func (c *Comm) freeWork() error {
	if c.work == nil {
		return nil
	}
	err := unix.Munmap(c.work)
	c.work = nil
	return err
}

// overlaps reports whether a and b share any byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// pipelineWindow is pipeline with bounded staging: as there, send unit u waits until
// need(u) receive units have completed; in addition receive unit v waits until
// free(v) send units have completed, so that units can take turns in a few slots of
// staging memory (unit v's slot is free again once the send that forwards the unit
// before it in that slot has finished).
func (e *exec) pipelineWindow(nsend, nrecv int, need, free func(u int) int, sendUnit, recvUnit func(u int) error) error {
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	received, sent, stopped := 0, 0, false
	stop := func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		cond.Broadcast()
	}
	// wait blocks until *counter >= n or the operation stopped; it reports whether
	// to go on.
	wait := func(counter *int, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		for *counter < n && !stopped {
			cond.Wait()
		}
		return !stopped
	}
	reached := func(counter *int, n int) bool {
		mu.Lock()
		defer mu.Unlock()
		return *counter >= n
	}
	bump := func(counter *int) {
		mu.Lock()
		*counter++
		mu.Unlock()
		cond.Broadcast()
	}
	var wg sync.WaitGroup
	defer e.joinOnPanic(stop, &wg)
	if nsend > 0 {
		e.guard.Go("window sender", &wg, func(err error) { e.fail(err); stop() }, func() {
			for u := 0; u < nsend; u++ {
				// After a failure only the first unit still goes out (see exec.pipeline),
				// and only if what it forwards has arrived.
				if !wait(&received, need(u)) && (u > 0 || !reached(&received, need(u))) {
					return
				}
				if err := sendUnit(u); err != nil {
					e.fail(err)
					stop()
					return
				}
				bump(&sent)
			}
		})
	}
	for v := 0; v < nrecv; v++ {
		if !wait(&sent, free(v)) {
			break
		}
		if err := recvUnit(v); err != nil {
			e.fail(err)
			stop()
			break
		}
		bump(&received)
	}
	wg.Wait()
	return e.result()
}

// sendChunked sends p to peer in frames of at most chunkBytes (one frame if p is
// empty); each frame's header offset is its byte offset within p.
func (e *exec) sendChunked(peer int, p []byte) error {
	nch := max(1, ceilDiv(len(p), e.chunkBytes))
	for j := 0; j < nch; j++ {
		lo, hi := split(len(p), nch, j)
		if err := e.send(peer, lo, p[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// recvChunked receives what sendChunked sent.
func (e *exec) recvChunked(peer int, p []byte) error {
	nch := max(1, ceilDiv(len(p), e.chunkBytes))
	for j := 0; j < nch; j++ {
		lo, hi := split(len(p), nch, j)
		if err := e.recv(peer, lo, p[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// vArgs are alltoallv's per-peer counts and displacements, in elements.
type vArgs struct {
	sendCounts, sendDispls, recvCounts, recvDispls []int
}
