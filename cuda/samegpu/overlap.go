package samegpu

import (
	"fmt"
	"sync/atomic"
	"time"
)

// The ranks' streams order each other, so that a call returns once its part is on its
// stream, before any of the operation's GPU work has run (DDP's bucket all_reduces then
// overlap the backward pass, as on the staged path). Operation n:
//
//	follower r's stream:  [copy in] | write launcher.arrive[r] = n |
//	                      wait own.go >= n | [copy out] | write own.stream = n
//	launcher's stream:    for each follower r: wait own.arrive[r] >= n |
//	                      kernels | write own.stream = n | for each follower r: write r.go = n
//
// The hosts still meet: a follower publishes its buffers and waits (on the host) until
// the launcher has read them and enqueued the operation, so that every rank sees a
// mismatch in the same operation, and the launcher waits for every follower's
// description before it can map its buffers. Neither waits for GPU work.
//
// A stream waits only on words of its own rank's page (arrive[] in the launcher's,
// go in a follower's), written by another rank's stream. So a rank can release its own
// stream, and only its own: a watcher goroutine per rank follows its stream's word
// (own.stream) while operations are on the GPU, and gives up when the communicator
// fails (Watch: a dead or stopped peer, an abort) or when its stream has made no
// progress for the path's timeout. It then writes, from the host, a value that
// satisfies every wait its stream has queued (the last operation enqueued plus 2^30,
// in the cyclic comparison CU_STREAM_WAIT_VALUE_GEQ makes), again and again until its
// stream has run everything enqueued, since a live peer's stream may still overwrite
// the word with a smaller value. The operations released that way ran without their
// inputs: the error the rank's next operation and Close return says so. No other rank
// is released by it: each gives up when its own host learns of the failure.
//
// Without MPS, the contexts of the ranks' processes take turns on the GPU, and a
// stream waiting for another context's write keeps its turn: a wait that is not
// already met when its stream reaches it costs up to a time slice of the GPU.

// streamSync is a rank's part of the stream ordering above.
type streamSync struct {
	enqueued atomic.Uint64         // the last operation whose whole part is on this rank's stream
	failed   atomic.Pointer[error] // why the watcher gave up: the next operation and Close return it
	kick     chan struct{}         // an operation was enqueued
	stop     chan struct{}
	done     chan struct{}
}

// startWatch starts the watcher of this rank's stream (after connect).
func (g *SameGPU) startWatch() {
	g.sync.kick = make(chan struct{}, 1)
	g.sync.stop = make(chan struct{})
	g.sync.done = make(chan struct{})
	go g.watchStream()
}

// stopWatch stops the watcher and waits for it.
func (g *SameGPU) stopWatch() {
	if g.sync.stop == nil {
		return
	}
	close(g.sync.stop)
	<-g.sync.done
	g.sync.stop = nil
}

// enqueued says operation n's part is on this rank's stream.
func (g *SameGPU) enqueued(n uint64) {
	g.sync.enqueued.Store(n)
	select {
	case g.sync.kick <- struct{}{}:
	default:
	}
}

// watchPause is how often the watcher looks while operations are on the GPU.
const watchPause = time.Millisecond

func (g *SameGPU) watchStream() {
	defer close(g.sync.done)
	var seen uint32
	var since time.Time // when the stream word last moved, while operations are pending
	var stopAt time.Time
	for {
		n := g.sync.enqueued.Load()
		if n == 0 || g.own.streamReached(n) {
			since = time.Time{}
			select {
			case <-g.sync.stop:
				return
			case <-g.sync.kick:
			}
			continue
		}
		if v := g.own.word32(seqStream).Load(); since.IsZero() || v != seen {
			seen, since = v, time.Now()
		}
		if g.sync.failed.Load() == nil {
			g.check(n, since)
		}
		if g.sync.failed.Load() != nil {
			if stopAt.IsZero() {
				stopAt = time.Now().Add(max(g.timeout, time.Second))
			}
			if time.Now().Before(stopAt) { // else a stream held by something else than this path's waits
				g.release(n)
			}
		}
		select {
		case <-g.sync.stop:
			return
		case <-time.After(watchPause):
		}
	}
}

// check gives up on the path if the communicator has failed or this rank's stream has
// been stuck at operation n's part (or before it) since since for the path's timeout.
func (g *SameGPU) check(n uint64, since time.Time) {
	var why error
	if err := g.commErr(); err != nil {
		why = fmt.Errorf("%s, and gave up: the communicator failed: %w", g.stuck(n), err)
	} else if time.Since(since) > g.timeout {
		why = fmt.Errorf("%w: %s for %v", ErrSameGPUTimeout, g.stuck(n), g.timeout)
	}
	if why != nil {
		g.sync.failed.CompareAndSwap(nil, &why)
	}
}

// stuck says what this rank's stream waits for, operations up to n being enqueued.
func (g *SameGPU) stuck(n uint64) string {
	at := uint64(g.own.word32(seqStream).Load()) + 1 // the operation the stream is in (mod 2^32)
	if g.rank != launcher {
		return fmt.Sprintf("rank %d's stream waited for rank %d's same-GPU operation %d to run on the GPU", g.rank, launcher, at)
	}
	for p := range g.nranks {
		if p != g.rank && !reached(g.own.word32(seqArrive+4*p).Load(), at) {
			return fmt.Sprintf("rank %d's stream waited for rank %d's stream to reach same-GPU operation %d", g.rank, p, at)
		}
	}
	return fmt.Sprintf("rank %d's stream did not finish same-GPU operation %d (up to %d enqueued)", g.rank, at, n)
}

// release satisfies every wait this rank's stream has queued for operations up to n.
func (g *SameGPU) release(n uint64) {
	v := uint32(n) + 1<<30
	if g.rank != launcher {
		g.own.word32(seqGo).Store(v)
		return
	}
	for p := range g.nranks {
		if p != g.rank {
			g.own.word32(seqArrive + 4*p).Store(v)
		}
	}
}

// watchErr is why the watcher gave up on the path, or nil.
func (g *SameGPU) watchErr() error {
	if e := g.sync.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// drainOwn waits until this rank's stream has run its part of every operation
// enqueued (Close: its streams may still read the exchange buffers and wait on its
// page). It releases the stream itself, as the watcher does, once the communicator
// has failed or at the deadline, and returns an error if even that does not drain it.
func (g *SameGPU) drainOwn(deadline time.Time) error {
	n := g.sync.enqueued.Load()
	if n == 0 {
		return nil
	}
	hard := deadline.Add(max(g.timeout, time.Second)) // after a release, how long to wait for the stream
	return g.waitGPU(hard, func() string {
		return fmt.Sprintf("rank %d waited for its stream to finish its same-GPU operations before closing (%s)", g.rank, g.stuck(n))
	}, func() (bool, error) {
		if g.own.streamReached(n) {
			return true, nil
		}
		if g.sync.failed.Load() == nil {
			if err := g.commErr(); err != nil || time.Now().After(deadline) {
				why := fmt.Errorf("%s before closing, and gave up: %w", g.stuck(n), orTimeout(err))
				g.sync.failed.CompareAndSwap(nil, &why)
			}
		}
		if g.sync.failed.Load() != nil {
			g.release(n)
		}
		return false, nil
	})
}

func orTimeout(err error) error {
	if err != nil {
		return fmt.Errorf("the communicator failed: %w", err)
	}
	return ErrSameGPUTimeout
}
